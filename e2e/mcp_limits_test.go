package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/awareness/awareness/internal/testenv"
)

// What an MCP client must not be able to do to the real binary (CLT-6, ERR-3): reach
// another token's session, end the stdio process with its input, or make the service
// unreachable with one token.

const devToken = "dev-5b7d9f1a3c5e7a9b1d2f4a6c8e0b2d4f"

// writeAuthFileWithDev writes an auth file with admin, agent:ops and agent:dev tokens.
func writeAuthFileWithDev(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "auth.json")
	doc := `{"tokens":[{"name":"dashboard","role":"admin","token":"` + adminToken + `"},{"name":"gw-ops","role":"agent:ops","token":"` + opsToken +
		`"},{"name":"gw-dev","role":"agent:dev","token":"` + devToken + `"}]}`
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// mcpHTTP is one raw streamable HTTP exchange with /mcp.
type mcpHTTP struct {
	status int
	header http.Header
	body   string
}

// mcpDo sends one request to /mcp and reads at most for 5 s (an SSE answer to a call
// ends with its response; a GET stream is cut).
func mcpDo(t *testing.T, hc *http.Client, base, method, token, session, body string) mcpHTTP {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, base+"/mcp", strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s /mcp: %v", method, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body) // a context deadline cuts a stream: what came is kept
	return mcpHTTP{resp.StatusCode, resp.Header, string(b)}
}

const mcpInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// mcpOpen opens a session with raw HTTP and returns its id ("" when refused).
func mcpOpen(t *testing.T, hc *http.Client, base, token string) (string, mcpHTTP) {
	t.Helper()
	r := mcpDo(t, hc, base, http.MethodPost, token, "", mcpInitialize)
	id := r.header.Get("Mcp-Session-Id")
	if errCode(r.body) != "" {
		return "", r // refused at initialize: the SDK ends the session
	}
	if id != "" {
		mcpDo(t, hc, base, http.MethodPost, token, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	}
	return id, r
}

// errCode is the ERR-1 code (data.code) of a JSON-RPC error in a JSON or SSE body.
func errCode(body string) string {
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		var m struct {
			Error *struct {
				Data struct{ Code string } `json:"data"`
			} `json:"error"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Error != nil {
			return m.Error.Data.Code
		}
	}
	return ""
}

// The real binary binds an MCP session to the token that opened it (CLT-6): another
// token on its id, another agent's or an admin's, gets on GET, POST and DELETE the 404
// an unknown id gets; the session goes on and no notification reaches anyone else.
func TestMCP_SessionBoundToItsToken_CLT6(t *testing.T) {
	s := startServerWith(t, filepath.Join(t.TempDir(), "awareness.db"), serverOpts{args: []string{"--auth-file", writeAuthFileWithDev(t)}})
	hc := &http.Client{}
	id, r := mcpOpen(t, hc, s.base, opsToken)
	if id == "" {
		t.Fatalf("initialize: %d %s", r.status, r.body)
	}
	if strings.Contains(s.logs.String(), id) {
		t.Error("the session id is in the log")
	}
	sub := mcpDo(t, hc, s.base, http.MethodPost, opsToken, id, `{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"awareness://notices/agent:ops:main"}}`)
	if sub.status != http.StatusOK || errCode(sub.body) != "" {
		t.Fatalf("subscribe: %d %s", sub.status, sub.body)
	}
	unknown := mcpDo(t, hc, s.base, http.MethodPost, devToken, "0123456789ABCDEFGHIJKLMNOP", `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`)
	if unknown.status != http.StatusNotFound || errCode(unknown.body) != "NOT_FOUND" {
		t.Fatalf("an unknown session id: %d %s", unknown.status, unknown.body)
	}
	for _, tok := range []string{devToken, adminToken} {
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
			body := ""
			if m == http.MethodPost {
				body = `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`
			}
			got := mcpDo(t, hc, s.base, m, tok, id, body)
			if got.status != unknown.status || got.body != unknown.body {
				t.Errorf("%s of ops's session with another token: %d %s, want what an unknown id gets: %d %s", m, got.status, got.body, unknown.status, unknown.body)
			}
		}
	}
	// ops's session is intact and hears of its own watcher's notice on its stream;
	// dev, listening on a session of its own, hears nothing.
	devID, _ := mcpOpen(t, hc, s.base, devToken)
	mcpDo(t, hc, s.base, http.MethodPost, devToken, devID, `{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"awareness://notices/agent:dev:main"}}`)
	var opsStream, devStream string
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); opsStream = mcpDo(t, hc, s.base, http.MethodGet, opsToken, id, "").body }()
	go func() { defer wg.Done(); devStream = mcpDo(t, hc, s.base, http.MethodGet, devToken, devID, "").body }()
	time.Sleep(500 * time.Millisecond)
	if c := s.do(opsToken, recordMutation, map[string]any{"in": map[string]any{"sessionKey": "agent:ops:subagent:c", "kind": "human_direct_message",
		"actorType": "human", "watchers": []string{"agent:ops:main"}}}); c.err != nil || len(c.resp.Errors) > 0 {
		t.Fatalf("recordEvent: %v %+v", c.err, c.resp.Errors)
	}
	wg.Wait()
	if !strings.Contains(opsStream, "notifications/resources/updated") {
		t.Errorf("ops's stream did not carry its update: %q", opsStream)
	}
	if strings.Contains(devStream, "notifications/resources/updated") {
		t.Errorf("dev's stream carried ops's update: %q", devStream)
	}
}

// stdioPeer is a raw JSON-RPC peer of `awareness mcp` over its stdin and stdout.
type stdioPeer struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

func startStdio(t *testing.T, args ...string) *stdioPeer {
	t.Helper()
	cmd := exec.Command(serverBin, append([]string{"mcp"}, args...)...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &syncBuffer{}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &stdioPeer{t: t, cmd: cmd, in: in, lines: make(chan string, 64)}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		_ = in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	return p
}

// ask writes one line and returns the answer with the given id.
func (p *stdioPeer) ask(line string, id int) string {
	p.t.Helper()
	if _, err := io.WriteString(p.in, line+"\n"); err != nil {
		p.t.Fatalf("write to awareness mcp: %v (stderr: %s)", err, p.cmd.Stderr)
	}
	deadline := time.After(wait)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				p.t.Fatalf("awareness mcp ended its output (stderr: %s)", p.cmd.Stderr)
			}
			var m struct {
				ID json.RawMessage `json:"id"`
			}
			if json.Unmarshal([]byte(l), &m) == nil && string(m.ID) == strconv.Itoa(id) {
				return l
			}
		case <-deadline:
			p.t.Fatalf("no answer with id %d to %q (stderr: %s)", id, line, p.cmd.Stderr)
		}
	}
}

// `awareness mcp` refuses, with a code, a resource URI with a control character and
// input that is not valid text, without ending: the next call is answered (ERR-3).
func TestMCP_StdioRefusesBadInputAndGoesOn_ERR3(t *testing.T) {
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	p := startStdio(t, "--url", s.base+"/mcp")
	p.ask(strings.ReplaceAll(mcpInitialize, `"id":1`, `"id":1`), 1)
	if _, err := io.WriteString(p.in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	id := 10
	for _, c := range []struct{ name, line string }{
		{"read, NUL escaped", `{"jsonrpc":"2.0","id":ID,"method":"resources/read","params":{"uri":"awareness://notices/agent:main:ma\u0000in"}}`},
		{"read, BEL", `{"jsonrpc":"2.0","id":ID,"method":"resources/read","params":{"uri":"awareness://notices/agent:main:\u0007"}}`},
		{"subscribe, %00", `{"jsonrpc":"2.0","id":ID,"method":"resources/subscribe","params":{"uri":"awareness://notices/agent:main:%00"}}`},
		{"unsubscribe, ESC", `{"jsonrpc":"2.0","id":ID,"method":"resources/unsubscribe","params":{"uri":"awareness://notices/\u001b[2J"}}`},
		{"invalid UTF-8", "{\"jsonrpc\":\"2.0\",\"id\":ID,\"method\":\"tools/call\",\"params\":{\"name\":\"pending_notices\",\"arguments\":{\"watcher\":\"agent:main:\xff\"}}}"},
		{"lone surrogate", `{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"pending_notices","arguments":{"watcher":"agent:main:\udc00"}}}`},
		{"NUL in a tool argument", `{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"session_status","arguments":{"sessionKey":"agent:main:\u0000"}}}`},
	} {
		id++
		ans := p.ask(strings.Replace(c.line, "ID", strconv.Itoa(id), 1), id)
		code := errCode(ans)
		if code == "" && strings.Contains(ans, `"isError":true`) && strings.Contains(ans, "INVALID_ARGUMENT: ") {
			code = "INVALID_ARGUMENT"
		}
		if code != "INVALID_ARGUMENT" || strings.ContainsAny(ans, "\x00\x07\x1b") {
			t.Errorf("%s: %q, want an INVALID_ARGUMENT refusal", c.name, ans)
		}
	}
	ans := p.ask(`{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"pending_notices","arguments":{"watcher":"agent:main:main"}}}`, 99)
	if !strings.Contains(ans, `pendingNotices`) {
		t.Errorf("the call after the refusals: %q", ans)
	}
	if p.cmd.ProcessState != nil {
		t.Errorf("awareness mcp exited: %v", p.cmd.ProcessState)
	}
}

// Under a limit of 512 file descriptors, one agent token that opens every MCP session,
// subscription, event stream and long poll it can, and batches, cannot make /healthz
// or an admin's call fail: its sessions and subscriptions are capped, subscriptions
// hold no descriptor, and a refused request closes at once (CLT-6).
func TestMCP_OneTokenCannotExhaustDescriptors_CLT6(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		testenv.Missing(t, "MCP descriptor limit", "prlimit (util-linux) is not installed: apt-get install util-linux")
	}
	s := startServerWith(t, filepath.Join(t.TempDir(), "awareness.db"), serverOpts{
		args: []string{"--auth-file", writeAuthFileWithDev(t)},
		wrap: func(bin string, args []string) *exec.Cmd {
			return exec.Command("prlimit", append([]string{"--nofile=512:512", "--", bin}, args...)...)
		},
	})
	var healthFail atomic.Int64
	var healthOK atomic.Int64
	stop := make(chan struct{})
	var probes sync.WaitGroup
	probes.Add(1)
	go func() {
		defer probes.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			// Generous: the machine may be loaded; descriptors run out for good, not for
			// seconds.
			c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			resp, err := c.Get(s.base + "/healthz")
			if err != nil || resp.StatusCode != http.StatusOK {
				healthFail.Add(1)
			} else {
				healthOK.Add(1)
			}
			if resp != nil {
				resp.Body.Close()
			}
		}
	}()

	attacker := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var (
		mu                sync.Mutex
		sessions          []string
		refusedSessions   int
		refusedSubscribes int
	)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for range 200 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			id, r := mcpOpen(t, attacker, s.base, opsToken)
			mu.Lock()
			defer mu.Unlock()
			if id != "" {
				sessions = append(sessions, id)
			} else if errCode(r.body) == "RATE_LIMITED" {
				refusedSessions++
			} else {
				t.Errorf("initialize: %d %s", r.status, r.body)
			}
		}()
	}
	wg.Wait()
	// Each session: an event stream held open, four subscriptions, a long poll.
	streamCtx, endStreams := context.WithCancel(context.Background())
	defer endStreams()
	for i, id := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(streamCtx, http.MethodGet, s.base+"/mcp", nil)
			req.Header.Set("Accept", "text/event-stream")
			req.Header.Set("Authorization", "Bearer "+opsToken)
			req.Header.Set("Mcp-Session-Id", id)
			if resp, err := attacker.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
		for j := range 4 {
			r := mcpDo(t, attacker, s.base, http.MethodPost, opsToken, id, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"resources/subscribe","params":{"uri":"awareness://notices/agent:ops:w%d-%d"}}`, 10+j, i, j))
			if errCode(r.body) == "RATE_LIMITED" {
				refusedSubscribes++
			}
		}
	}
	var refusedWaits atomic.Int64
	for _, id := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := mcpDo(t, attacker, s.base, http.MethodPost, opsToken, id, `{"jsonrpc":"2.0","id":50,"method":"tools/call","params":{"name":"wait_for_notices","arguments":{"watcher":"agent:ops:main","timeoutMs":1500}}}`)
			if strings.Contains(r.body, "RATE_LIMITED: ") {
				refusedWaits.Add(1)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	fds := processFDs(t, s.cmd.Process.Pid)
	admin := mcpConnect(t, s.base+"/mcp", adminToken)
	if r, err := admin.CallTool(context.Background(), &mcp.CallToolParams{Name: "session_status", Arguments: map[string]any{"sessionKey": "agent:main:main"}}); err != nil || r.IsError {
		t.Errorf("an admin's call during the flood: %v %v", err, r)
	}
	endStreams()
	wg.Wait()
	close(stop)
	probes.Wait()
	t.Logf("one agent token: %d sessions opened, %d refused (RATE_LIMITED), %d subscriptions and %d waits refused; server fds during the flood %d of 512; /healthz %d ok, %d failed",
		len(sessions), refusedSessions, refusedSubscribes, refusedWaits.Load(), fds, healthOK.Load(), healthFail.Load())
	if refusedWaits.Load() != int64(len(sessions)) {
		t.Errorf("%d waits refused, want all %d: the subscriptions hold the cap", refusedWaits.Load(), len(sessions))
	}
	if len(sessions) != 64 || refusedSessions != 136 {
		t.Errorf("%d sessions opened and %d refused, want the cap of 64 and 136", len(sessions), refusedSessions)
	}
	if refusedSubscribes != 64*4-128 {
		t.Errorf("%d subscriptions refused, want %d past the cap of 128", refusedSubscribes, 64*4-128)
	}
	if healthFail.Load() > 0 || healthOK.Load() == 0 {
		t.Errorf("/healthz failed %d times (%d ok)", healthFail.Load(), healthOK.Load())
	}
	if strings.Contains(s.logs.String(), "too many open files") {
		t.Errorf("the server ran out of descriptors:\n%s", tail(s.logs.String(), 2000))
	}
}

func processFDs(t *testing.T, pid int) int {
	t.Helper()
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Logf("fds of %d: %v", pid, err)
		return -1
	}
	return len(es)
}

// `awareness mcp` outlives a restart of the service: the first call after it is
// answered on a new service session, and a subscription made before it is made again,
// so the next notice is announced.
func TestMCP_StdioSurvivesServiceRestart(t *testing.T) {
	db := filepath.Join(t.TempDir(), "awareness.db")
	s := startServer(t, db)
	var updates atomic.Int64
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(context.Context, *mcp.ResourceUpdatedNotificationRequest) { updates.Add(1) }})
	proxyLog := &syncBuffer{}
	cmd := exec.Command(serverBin, "mcp", "--url", s.base+"/mcp", "--log-level", "debug")
	cmd.Stderr = proxyLog
	cs, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	defer func() {
		if t.Failed() {
			t.Logf("awareness mcp:\n%s", tail(proxyLog.String(), 4000))
		}
	}()
	ctx := context.Background()
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "awareness://notices/" + mainWatcher}); err != nil {
		t.Fatal(err)
	}
	s.mustRecord(t, map[string]any{"sessionKey": "agent:main:subagent:before", "kind": "human_direct_message", "actorType": "human", "watchers": []string{mainWatcher}})
	deadline0 := time.Now().Add(wait)
	for updates.Load() == 0 {
		if time.Now().After(deadline0) {
			t.Fatal("no notifications/resources/updated before the restart")
		}
		time.Sleep(50 * time.Millisecond)
	}
	updates.Store(0)
	addr := s.addr
	if st := s.stop(syscall.SIGTERM); !st.Success() {
		t.Fatalf("stop: %v", st)
	}
	s = startServerWith(t, db, serverOpts{addr: addr})
	// The service no longer has the proxy's session: the call, refused before it ran,
	// runs again on a new one.
	if r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "pending_notices", Arguments: map[string]any{"watcher": mainWatcher}}); err != nil || r.IsError {
		t.Fatalf("the first call after the restart: %v %v", err, r)
	}
	waitFor := time.Now().Add(wait)
	for {
		s.mustRecord(t, map[string]any{"sessionKey": "agent:main:subagent:restart-" + strconv.FormatInt(time.Now().UnixNano(), 36),
			"kind": "human_direct_message", "actorType": "human", "watchers": []string{mainWatcher}})
		time.Sleep(300 * time.Millisecond)
		if updates.Load() > 0 {
			break
		}
		if time.Now().After(waitFor) {
			t.Fatal("no notifications/resources/updated after the restart: the subscription was not made again")
		}
	}
}

// /mcp answers the hosts every route answers (--allowed-hosts, on a loopback listener
// too) and refuses the others with FORBIDDEN before any MCP session starts (CLT-6).
func TestMCP_HostRuleIsTheServers_CLT6(t *testing.T) {
	s := startServerWith(t, filepath.Join(t.TempDir(), "awareness.db"), serverOpts{args: []string{"--allowed-hosts", "awareness.test"}})
	for _, c := range []struct {
		host   string
		status int
	}{{"awareness.test", http.StatusOK}, {"localhost", http.StatusOK}, {"evil.test", http.StatusForbidden}} {
		req, _ := http.NewRequest(http.MethodPost, s.base+"/mcp", strings.NewReader(mcpInitialize))
		req.Host = c.host
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || (c.status == http.StatusForbidden && !strings.Contains(string(b), "FORBIDDEN")) ||
			(c.status == http.StatusOK) != (resp.Header.Get("Mcp-Session-Id") != "") {
			t.Errorf("Host %s: %d %s, want %d", c.host, resp.StatusCode, b, c.status)
		}
	}
}
