package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// redeliveryBound is how long after SIGTERM every default client must have its pending
// notice again. graphql-ws and graphql-sse wait 1.3–4 s before their first retry and
// 2.3–5 s before the second (randomised exponential backoff); the restart itself takes
// well under a second, so a client needs at most its second retry: about 9 s, plus
// headroom for a loaded CI machine.
const redeliveryBound = 20 * time.Second

// clientNames are the clients of e2e/node/clients.mjs.
var clientNames = []string{"apollo", "urql", "graphql-ws", "subscriptions-transport-ws", "graphql-sse"}

// Every real GraphQL client, with its default options, keeps its notices across a
// deploy: Apollo Client (HttpLink + GraphQLWsLink), @urql/core (subscriptionExchange
// on graphql-ws), graphql-ws, subscriptions-transport-ws (reconnect: true, its only
// way to reconnect) and graphql-sse each run a query and a mutation, subscribe and
// receive a notice; then the server is stopped with SIGTERM and started again on the
// same database and port, and each receives the notice, still pending, again within
// redeliveryBound, with no application code: WebSockets are closed with 1012, which
// graphql-ws retries, SSE streams end without `complete`, which graphql-sse retries.
func TestDefaultClients_KeepNoticesAcrossRestart_NTC5(t *testing.T) {
	t.Parallel()
	node, dir := nodeClient(t)
	db := filepath.Join(t.TempDir(), "awareness.db")
	s1 := startServer(t, db)

	ctx := withTimeout(t, 3*wait+redeliveryBound)
	cmd := exec.CommandContext(ctx, node, "clients.mjs", s1.base+"/query", s1.wsURL, mainWatcher)
	cmd.Dir = dir
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	type event struct {
		client, what string
		at           time.Time
		rest         string
	}
	events := make(chan event, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			f := strings.SplitN(sc.Text(), " ", 4)
			if len(f) < 3 {
				events <- event{what: "LINE", rest: sc.Text()}
				continue
			}
			ms, _ := strconv.ParseInt(f[2], 10, 64)
			e := event{client: f[0], what: f[1], at: time.UnixMilli(ms)}
			if f[1] == "ERROR" {
				e.rest = strings.Join(f[2:], " ")
			} else if len(f) == 4 {
				e.rest = f[3]
			}
			events <- e
		}
		close(events)
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("node stderr:\n%s", tail(stderr.String(), 4000))
		}
	})
	// await collects, per client, the first event of kind what, until every client
	// has one; any ERROR fails the test.
	await := func(what string, limit time.Duration) map[string]event {
		t.Helper()
		got := map[string]event{}
		timer := time.NewTimer(limit)
		defer timer.Stop()
		for len(got) < len(clientNames) {
			select {
			case e, ok := <-events:
				if !ok {
					t.Fatalf("node exited waiting for %s (have %v): %s", what, keys(got), stderr.String())
				}
				switch {
				case e.what == "ERROR":
					t.Fatalf("%s reported an error waiting for %s: %s", e.client, what, e.rest)
				case e.what == what:
					if _, dup := got[e.client]; !dup {
						got[e.client] = e
					}
				}
			case <-timer.C:
				t.Fatalf("waiting for %s: only %v within %v", what, keys(got), limit)
			}
		}
		return got
	}
	check := func(e event) {
		t.Helper()
		var n notice
		if err := json.Unmarshal([]byte(e.rest), &n); err != nil {
			t.Fatalf("%s notice %q: %v", e.client, e.rest, err)
		}
		wantNotice(t, n, mainWatcher, "agent:main:subagent:deploy", 1)
	}

	await("READY", 2*wait)
	s1.spawn(t, "agent:main:subagent:deploy", mainWatcher)
	s1.humanTurn(t, "agent:main:subagent:deploy")
	for _, e := range await("NOTICE", wait) {
		check(e)
	}

	// The deploy: SIGTERM, then the new process on the same database and port.
	term := time.Now()
	if st := s1.stop(syscall.SIGTERM); !st.Success() {
		t.Fatalf("SIGTERM exit: %v", st)
	}
	stopped := time.Now()
	s2 := startServerWith(t, db, serverOpts{addr: s1.addr})
	listening := time.Now()
	again := await("NOTICE", redeliveryBound)
	for _, name := range clientNames {
		e := again[name]
		check(e)
		t.Logf("%-27s pending notice again %5d ms after SIGTERM, %5d ms after the new process was ready (shutdown took %d ms)",
			name, e.at.Sub(term).Milliseconds(), e.at.Sub(listening).Milliseconds(), stopped.Sub(term).Milliseconds())
		if d := e.at.Sub(term); d > redeliveryBound {
			t.Errorf("%s: notice again %v after SIGTERM, want within %v", name, d, redeliveryBound)
		}
	}
	if n := len(s2.pendingNotices(t, mainWatcher)); n != 1 {
		t.Errorf("pending notices after the restart = %d, want 1 (redelivery must not acknowledge)", n)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// The GraphQL-over-HTTP audit suite of the npm graphql-http package (serverAudits)
// against the real binary: no MUST and no SHOULD fails.
func TestGraphQLOverHTTPAudit(t *testing.T) {
	t.Parallel()
	node, dir := nodeClient(t)
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	ctx := withTimeout(t, wait)
	cmd := exec.CommandContext(ctx, node, "audit.mjs", s.base+"/query")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("audit: %v\n%s", err, out)
	}
	var r struct {
		Must, Should, May struct{ OK, Failed int }
		Failures          []struct{ ID, Name, Reason string }
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("audit output %q: %v", out, err)
	}
	t.Logf("graphql-http audit: MUST %d passed %d failed, SHOULD %d passed %d failed, MAY %d passed %d failed",
		r.Must.OK, r.Must.Failed, r.Should.OK, r.Should.Failed, r.May.OK, r.May.Failed)
	for _, f := range r.Failures {
		t.Logf("  %s %s: %s", f.ID, f.Name, f.Reason)
	}
	if r.Must.Failed != 0 || r.Should.Failed != 0 || r.Must.OK == 0 || r.Should.OK == 0 {
		t.Errorf("audit: %d MUST and %d SHOULD failures, want none", r.Must.Failed, r.Should.Failed)
	}
}

// A legacy graphql-ws (subscriptions-transport-ws) connection that sent
// connection_init stays open past the init timeout: the timer stops at
// connection_init on both protocols (it used to close such connections with 4408).
func TestLegacyProtocol_StaysOpenPastInitTimeout(t *testing.T) {
	t.Parallel()
	s := startServerWith(t, filepath.Join(t.TempDir(), "awareness.db"), serverOpts{args: []string{"--ws-init-timeout", "500ms"}})
	d := websocket.Dialer{Subprotocols: []string{"graphql-ws"}, HandshakeTimeout: 5 * time.Second}
	c, _, err := d.Dial(s.wsURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WriteJSON(frame{Type: "connection_init"}); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var f frame
	if err := c.ReadJSON(&f); err != nil || f.Type != "connection_ack" {
		t.Fatalf("got %+v, %v; want connection_ack", f, err)
	}
	// Three init timeouts later, the connection still serves a subscription.
	_ = c.SetReadDeadline(time.Now().Add(1500*time.Millisecond + 5*time.Second))
	time.Sleep(1500 * time.Millisecond)
	if err := c.WriteJSON(frame{Type: "start", ID: "1", Payload: json.RawMessage(`{"query":"subscription { staleNotices(watcher: \"` + mainWatcher + `\") { text } }"}`)}); err != nil {
		t.Fatal(err)
	}
	s.spawn(t, "agent:main:subagent:legacy", mainWatcher)
	s.humanTurn(t, "agent:main:subagent:legacy")
	for {
		if err := c.ReadJSON(&f); err != nil {
			t.Fatalf("the legacy connection ended after connection_ack: %v", err)
		}
		if f.Type == "data" && f.ID == "1" {
			break
		}
		if f.Type != "ka" {
			t.Fatalf("got %+v, want data for 1", f)
		}
	}
	// And one that never initialises is closed with 4408.
	c2, _, err := d.Dial(s.wsURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if code, _ := closeCodeOf(t, c2, 5*time.Second); code != 4408 {
		t.Errorf("uninitialised legacy connection closed with %d, want 4408", code)
	}
}

// CORS for --allowed-origins: a preflight and a cross-origin POST from an allowed
// origin succeed with the Access-Control headers; from another origin both are
// refused with 403 FORBIDDEN. A same-origin page and a request without Origin need no
// configuration.
func TestCORS_AllowedOriginOnly(t *testing.T) {
	t.Parallel()
	const allowed, foreign = "https://dash.example.com", "https://evil.example.net"
	s := startServerWith(t, filepath.Join(t.TempDir(), "awareness.db"), serverOpts{args: []string{"--allowed-origins", allowed}})
	do := func(method, origin string, h map[string]string, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(context.Background(), method, s.base+"/query", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := s.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	preflight := map[string]string{"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}
	post := map[string]string{"Content-Type": "application/json"}
	const q = `{"query":"{ __typename }"}`

	r := do(http.MethodOptions, allowed, preflight, "")
	if r.StatusCode/100 != 2 || r.Header.Get("Access-Control-Allow-Origin") != allowed ||
		!strings.Contains(strings.ToLower(r.Header.Get("Access-Control-Allow-Headers")), "authorization") ||
		!strings.Contains(r.Header.Get("Access-Control-Allow-Methods"), "POST") {
		t.Errorf("preflight from the allowed origin: %d %v", r.StatusCode, r.Header)
	}
	if r.Header.Get("Access-Control-Allow-Credentials") != "" {
		t.Errorf("preflight allows credentials (%q); tokens travel in Authorization only", r.Header.Get("Access-Control-Allow-Credentials"))
	}
	if r := do(http.MethodPost, allowed, post, q); r.StatusCode != 200 || r.Header.Get("Access-Control-Allow-Origin") != allowed {
		t.Errorf("POST from the allowed origin: %d, Access-Control-Allow-Origin %q", r.StatusCode, r.Header.Get("Access-Control-Allow-Origin"))
	}
	for _, tc := range []struct {
		method string
		h      map[string]string
		body   string
	}{{http.MethodOptions, preflight, ""}, {http.MethodPost, post, q}} {
		if r := do(tc.method, foreign, tc.h, tc.body); r.StatusCode != http.StatusForbidden || r.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("%s from a foreign origin: %d, Access-Control-Allow-Origin %q; want 403 without it", tc.method, r.StatusCode, r.Header.Get("Access-Control-Allow-Origin"))
		}
	}
	if r := do(http.MethodPost, s.base, post, q); r.StatusCode != 200 {
		t.Errorf("POST from the service's own origin: %d", r.StatusCode)
	}
	if r := do(http.MethodPost, "", post, q); r.StatusCode != 200 {
		t.Errorf("POST without Origin: %d", r.StatusCode)
	}
}

// A query string over 1 MiB gets the coded 414 of the handler, not net/http's
// plain-text 431: the server's header limit (graph.MaxHeaderBytes) is above it.
func TestOverlongQueryStringIsCoded(t *testing.T) {
	t.Parallel()
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	resp, err := s.client.Get(s.base + "/query?query=" + strings.Repeat("a", 1<<20+512<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r gqlResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("%d: the body is not the GraphQL error shape: %v", resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusRequestURITooLong || len(r.Errors) != 1 || r.Errors[0].Extensions["code"] != "INVALID_ARGUMENT" {
		t.Errorf("got %d %+v, want 414 INVALID_ARGUMENT", resp.StatusCode, r.Errors)
	}
}
