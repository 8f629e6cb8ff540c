package e2e

// Helpers of the reliability and security tests (crash_test.go, faults_test.go,
// auth_test.go, protocol_test.go, privacy_test.go): a server started with extra flags
// or under a wrapper command, and GraphQL calls that carry a bearer token and tell a
// transport failure from a GraphQL error.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// serverOpts configures startServerWith.
type serverOpts struct {
	// args are extra flags of serve.
	args []string
	// wrap, when set, builds the command from the binary and its arguments (e.g. to
	// run it in a private mount namespace); the process it starts must be the server
	// itself (exec), so that its pid is the server's.
	wrap func(bin string, args []string) *exec.Cmd
	// dbArg replaces the --db value passed to the server (a path inside a namespace).
	dbArg string
	// addr, when set, is the listen address (a restart on the port of a server that
	// just exited); otherwise a free port is picked.
	addr string
}

// startServerWith is startServer with extra flags or a wrapper command.
func startServerWith(t *testing.T, db string, o serverOpts) *server {
	t.Helper()
	for attempt := 0; ; attempt++ {
		s, retry := tryStartWith(t, db, o)
		if s != nil {
			return s
		}
		if !retry || attempt == 2 {
			t.Fatal("the server did not start")
		}
	}
}

func tryStartWith(t *testing.T, db string, o serverOpts) (s *server, retry bool) {
	t.Helper()
	s = launch(t, db, o)
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			logs := s.logs.String()
			if strings.Contains(logs, "address already in use") {
				return nil, true
			}
			t.Fatalf("the server exited before it was ready: %v\n%s", s.state, tail(logs, 4000))
		default:
		}
		resp, err := s.client.Get(s.base + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, false
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the server was not ready within %v\n%s", wait, tail(s.logs.String(), 4000))
	return nil, false
}

// launch starts the binary with o over db and returns at once, without waiting for
// it to be ready. The process is killed at the end of the test if still running.
func launch(t *testing.T, db string, o serverOpts) *server {
	t.Helper()
	addr := o.addr
	if addr == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = ln.Addr().String()
		ln.Close()
	}
	s := &server{
		t: t, db: db, addr: addr,
		base: "http://" + addr, wsURL: "ws://" + addr + "/query",
		logs: &syncBuffer{}, exited: make(chan struct{}),
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}},
	}
	dbArg := db
	if o.dbArg != "" {
		dbArg = o.dbArg
	}
	// The load and crash suites append far faster than the default rate limit of one
	// connection; TestRateLimit_ERR4 passes its own --rate-limit (a later flag wins).
	args := append([]string{"serve", "--addr", addr, "--db", dbArg, "--log-level", "info", "--rate-limit", "0"}, o.args...)
	if o.wrap != nil {
		s.cmd = o.wrap(serverBin, args)
	} else {
		s.cmd = exec.Command(serverBin, args...)
	}
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", serverBin, err)
	}
	go func() {
		_ = s.cmd.Wait()
		s.state = s.cmd.ProcessState
		close(s.exited)
	}()
	t.Cleanup(func() {
		s.kill()
		s.client.CloseIdleConnections()
		if t.Failed() {
			t.Logf("server %s logs:\n%s", s.addr, tail(s.logs.String(), 4000))
		}
	})
	return s
}

// call is the outcome of one GraphQL request: err is a transport failure (the
// outcome of a mutation is then unknown); otherwise status and the response.
type call struct {
	status int
	resp   gqlResponse
	err    error
}

func (c call) code() string {
	if len(c.resp.Errors) == 0 {
		return ""
	}
	code, _ := c.resp.Errors[0].Extensions["code"].(string)
	return code
}

// do posts one operation with an optional bearer token.
func (s *server) do(token, query string, vars map[string]any) call {
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		return call{err: err}
	}
	req, err := http.NewRequest(http.MethodPost, s.base+"/query", bytes.NewReader(body))
	if err != nil {
		return call{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return call{err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return call{err: err}
	}
	c := call{status: resp.StatusCode}
	if err := json.Unmarshal(raw, &c.resp); err != nil {
		return call{status: resp.StatusCode, err: fmt.Errorf("HTTP %d, body %q: %w", resp.StatusCode, tail(string(raw), 300), err)}
	}
	return c
}

// mustDo runs an operation that must succeed and decodes its data into dst.
func (s *server) mustDo(t *testing.T, token, query string, vars map[string]any, dst any) {
	t.Helper()
	c := s.do(token, query, vars)
	if c.err != nil || len(c.resp.Errors) > 0 {
		t.Fatalf("%s: HTTP %d %v %+v", firstLine(query), c.status, c.err, c.resp.Errors)
	}
	if dst != nil {
		if err := json.Unmarshal(c.resp.Data, dst); err != nil {
			t.Fatalf("decode %s: %v", c.resp.Data, err)
		}
	}
}

// logEvent is an event as the log check reads it.
type logEvent struct {
	Sequence int64  `json:"sequence"`
	Kind     string `json:"kind"`
	RunID    string `json:"runId"`
}

// readLog reads a session's whole log from changesSince 0, page by page; it returns
// the events, the head and whether a history gap was reported.
func (s *server) readLog(t *testing.T, token, key string) ([]logEvent, int64, bool) {
	t.Helper()
	var all []logEvent
	var after, head int64
	gap := false
	for {
		var d struct {
			SessionStatus struct {
				StateVersion int64 `json:"stateVersion"`
				StateChanges struct {
					Events           []logEvent `json:"events"`
					HistoryGap       bool       `json:"historyGap"`
					Truncated        bool       `json:"truncated"`
					NextChangesSince int64      `json:"nextChangesSince"`
				} `json:"stateChanges"`
			} `json:"sessionStatus"`
		}
		s.mustDo(t, token, `query($k: String!, $c: Int) { sessionStatus(sessionKey: $k, changesSince: $c) {
		  stateVersion stateChanges { events { sequence kind runId } historyGap truncated nextChangesSince } } }`,
			map[string]any{"k": key, "c": after}, &d)
		st := d.SessionStatus
		head = st.StateVersion
		gap = gap || st.StateChanges.HistoryGap
		all = append(all, st.StateChanges.Events...)
		if !st.StateChanges.Truncated {
			return all, head, gap
		}
		after = st.StateChanges.NextChangesSince
	}
}

// cursor is a watch cursor as the checks read it.
type cursor struct {
	Watcher       string `json:"watcher"`
	Target        string `json:"target"`
	TargetAgentID string `json:"targetAgentId"`
	LastAcked     int64  `json:"lastAcked"`
	Notified      int64  `json:"notified"`
	Material      int64  `json:"material"`
	Pending       bool   `json:"pending"`
}

func (s *server) cursors(t *testing.T, token string) []cursor {
	t.Helper()
	var d struct {
		Watches []cursor `json:"watches"`
	}
	s.mustDo(t, token, `{ watches { watcher target targetAgentId lastAcked notified material pending } }`, nil, &d)
	return d.Watches
}

// dialRaw opens a graphql-transport-ws connection without any protocol step.
func dialRaw(t *testing.T, url string, header http.Header) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: wait}
	c, resp, err := d.Dial(url, header)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	resp.Body.Close()
	t.Cleanup(func() { c.Close() })
	return c
}

// closeCodeOf reads until the connection ends and returns its close code (0 when it
// ended without a close frame) and when it ended.
func closeCodeOf(t *testing.T, c *websocket.Conn, limit time.Duration) (int, time.Time) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(limit))
	for {
		if _, _, err := c.ReadMessage(); err != nil {
			end := time.Now()
			if ce, ok := errors.AsType[*websocket.CloseError](err); ok {
				return ce.Code, end
			}
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				t.Fatalf("the connection was still open after %v", limit)
			}
			return 0, end
		}
	}
}

// initRaw completes the graphql-transport-ws handshake on a raw connection, with
// deadlines of the package's wait.
func initRaw(t *testing.T, c *websocket.Conn) {
	t.Helper()
	_ = c.SetWriteDeadline(time.Now().Add(wait))
	_ = c.SetReadDeadline(time.Now().Add(wait))
	if err := c.WriteJSON(frame{Type: "connection_init"}); err != nil {
		t.Fatal(err)
	}
	var ack frame
	if err := c.ReadJSON(&ack); err != nil || ack.Type != "connection_ack" {
		t.Fatalf("connection_ack: %+v %v", ack, err)
	}
}

// bigNoticeSelection is the notice fields plus the text under extra aliases, to make
// each notice frame large enough to fill socket buffers quickly.
func bigNoticeSelection(aliases int) string {
	var sel strings.Builder
	sel.WriteString(noticeFields)
	for i := range aliases {
		sel.WriteString(" t" + itoa(i) + ": text")
	}
	return sel.String()
}
