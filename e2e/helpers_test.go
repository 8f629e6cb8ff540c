// Package e2e holds the end-to-end tests of the notices feature: the real binary,
// built once in TestMain, started on a free port with a temporary database, driven over
// HTTP and WebSocket (a hand-rolled gorilla graphql-transport-ws client, and the npm
// graphql-ws / subscriptions-transport-ws clients of e2e/node).
package e2e

import (
	"bytes"
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
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/awareness/awareness/internal/syncbuf"
	"github.com/awareness/awareness/internal/testenv"
)

const (
	mainWatcher = "agent:main:main"
	// wait bounds every wait for something that must happen (generous on purpose: the
	// tests run with -race on small machines); quiet is the window in which nothing may
	// arrive, a negative check only.
	wait  = 15 * time.Second
	quiet = 400 * time.Millisecond
)

var (
	repoRoot  string // the module root (parent of e2e/)
	serverBin string // the binary built by TestMain
)

// TestMain builds the real binary once, from the repository root.
func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	repoRoot = filepath.Dir(wd)
	if _, err := os.Stat(filepath.Join(repoRoot, "go.mod")); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: cannot find the module root above", wd)
		return 1
	}
	dir, err := os.MkdirTemp("", "awareness-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	serverBin = filepath.Join(dir, "awareness")
	goTool, err := exec.LookPath("go")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: the go command is not in PATH:", err)
		return 1
	}
	build := exec.Command(goTool, "build", "-o", serverBin, ".")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go build failed: %v\n%s", err, out)
		return 1
	}
	return testenv.M(m).Run()
}

// syncBuffer collects a child process's or logger's output (see syncbuf).
type syncBuffer = syncbuf.Buffer

// ---------------------------------------------------------------------------------------
// The server process

type server struct {
	t      *testing.T
	db     string
	addr   string
	base   string // http://host:port
	wsURL  string // ws://host:port/query
	cmd    *exec.Cmd
	logs   *syncBuffer
	exited chan struct{}
	state  *os.ProcessState
	client *http.Client
}

// startServer starts the binary on a free port over db and waits for /readyz. The
// process is killed at the end of the test if still running.
func startServer(t *testing.T, db string) *server {
	t.Helper()
	return startServerWith(t, db, serverOpts{})
}

// kill sends SIGKILL (if still running) and waits for the exit.
func (s *server) kill() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// stop sends sig and waits for the process to exit; it returns the process state.
func (s *server) stop(sig syscall.Signal) *os.ProcessState {
	s.t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("signal %v: %v", sig, err)
	}
	select {
	case <-s.exited:
	case <-time.After(wait):
		s.t.Fatalf("the server did not exit within %v of %v", wait, sig)
	}
	s.client.CloseIdleConnections()
	return s.state
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// ---------------------------------------------------------------------------------------
// GraphQL over HTTP

type gqlError struct {
	Message    string         `json:"message"`
	Extensions map[string]any `json:"extensions"`
}

type gqlResponse struct {
	Data   json.RawMessage `json:"data"`
	Errors []gqlError      `json:"errors"`
}

// gql posts one operation and returns the response; transport failures are fatal.
func (s *server) gql(query string, vars map[string]any) (gqlResponse, error) {
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		return gqlResponse{}, err
	}
	resp, err := s.client.Post(s.base+"/query", "application/json", bytes.NewReader(body))
	if err != nil {
		return gqlResponse{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return gqlResponse{}, err
	}
	var out gqlResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		return gqlResponse{}, fmt.Errorf("HTTP %d, body %q: %w", resp.StatusCode, tail(string(raw), 300), err)
	}
	if len(out.Errors) > 0 {
		return out, fmt.Errorf("GraphQL errors: %+v", out.Errors)
	}
	return out, nil
}

// mustGQL runs an operation and decodes its data into dst (when non-nil).
func (s *server) mustGQL(t *testing.T, query string, vars map[string]any, dst any) {
	t.Helper()
	resp, err := s.gql(query, vars)
	if err != nil {
		t.Fatalf("%s: %v", firstLine(query), err)
	}
	if dst != nil {
		if err := json.Unmarshal(resp.Data, dst); err != nil {
			t.Fatalf("decode %s: %v", resp.Data, err)
		}
	}
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

const recordMutation = `mutation($in: RecordEventInput!) { recordEvent(input: $in) {
  recorded stateVersion noticesOpened event { sequence kind } } }`

type recordResult struct {
	Recorded      bool  `json:"recorded"`
	StateVersion  int64 `json:"stateVersion"`
	NoticesOpened int   `json:"noticesOpened"`
	Event         struct {
		Sequence int64  `json:"sequence"`
		Kind     string `json:"kind"`
	} `json:"event"`
}

// record calls recordEvent; the append is committed when it returns (SIG-7).
func (s *server) record(in map[string]any) (recordResult, error) {
	resp, err := s.gql(recordMutation, map[string]any{"in": in})
	if err != nil {
		return recordResult{}, err
	}
	var d struct {
		RecordEvent recordResult `json:"recordEvent"`
	}
	if err := json.Unmarshal(resp.Data, &d); err != nil {
		return recordResult{}, err
	}
	return d.RecordEvent, nil
}

func (s *server) mustRecord(t *testing.T, in map[string]any) recordResult {
	t.Helper()
	r, err := s.record(in)
	if err != nil {
		t.Fatalf("recordEvent %v: %v", in, err)
	}
	if !r.Recorded {
		t.Fatalf("recordEvent %v was deduplicated", in)
	}
	return r
}

// spawn records child_spawned on child with the parent as producer-passed watcher.
func (s *server) spawn(t *testing.T, child, parent string) int64 {
	t.Helper()
	r := s.mustRecord(t, map[string]any{
		"sessionKey": child, "kind": "child_spawned", "actorType": "agent", "actorId": parent,
		"watchers": []string{parent},
	})
	if r.NoticesOpened != 0 {
		t.Fatalf("child_spawned opened %d notices", r.NoticesOpened)
	}
	return r.Event.Sequence
}

// humanTurn records a human_direct_message on key.
func (s *server) humanTurn(t *testing.T, key string) recordResult {
	t.Helper()
	return s.mustRecord(t, map[string]any{
		"sessionKey": key, "kind": "human_direct_message", "actorType": "human", "actorId": "user:alice",
		"channel": "webchat",
	})
}

func (s *server) ack(t *testing.T, watcher string) []notice {
	t.Helper()
	var d struct {
		AckNotices []notice `json:"ackNotices"`
	}
	s.mustGQL(t, `mutation($w: String!) { ackNotices(watcher: $w) { `+noticeFields+` } }`, map[string]any{"w": watcher}, &d)
	return d.AckNotices
}

func (s *server) pendingNotices(t *testing.T, watcher string) []notice {
	t.Helper()
	var d struct {
		PendingNotices []notice `json:"pendingNotices"`
	}
	s.mustGQL(t, `query($w: String!) { pendingNotices(watcher: $w) { `+noticeFields+` } }`, map[string]any{"w": watcher}, &d)
	return d.PendingNotices
}

// ---------------------------------------------------------------------------------------
// Notices

const noticeFields = `watcher target targetAgentId changesSince notifiedVersion materialVersion text wake openedAt`

const noticeSubscription = `subscription($w: String) { staleNotices(watcher: $w) { ` + noticeFields + ` } }`

type notice struct {
	Watcher         string `json:"watcher"`
	Target          string `json:"target"`
	TargetAgentID   string `json:"targetAgentId"`
	ChangesSince    int64  `json:"changesSince"`
	NotifiedVersion int64  `json:"notifiedVersion"`
	MaterialVersion int64  `json:"materialVersion"`
	Text            string `json:"text"`
	Wake            bool   `json:"wake"`
	OpenedAt        string `json:"openedAt"`
}

// noticeText is NTC-1, byte for byte, written out independently of the service code.
func noticeText(target string, changesSince int64) string {
	return "Session \"" + target + "\" changed (other actor). Reconcile before acting: session_status sessionKey \"" +
		target + "\" changesSince " + strconv.FormatInt(changesSince, 10) + "."
}

func wantNotice(t *testing.T, n notice, watcher, target string, changesSince int64) {
	t.Helper()
	if want := noticeText(target, changesSince); n.Text != want {
		t.Fatalf("notice text\n got %q\nwant %q", n.Text, want)
	}
	if n.Watcher != watcher || n.Target != target || n.ChangesSince != changesSince {
		t.Fatalf("notice = %+v; want watcher %s target %s changesSince %d", n, watcher, target, changesSince)
	}
}

// ---------------------------------------------------------------------------------------
// A gorilla graphql-transport-ws client

type frame struct {
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
	at      time.Time       // when it was read
}

type wsClient struct {
	t      *testing.T
	c      *websocket.Conn
	wmu    sync.Mutex
	frames chan frame
	quit   chan struct{}
	done   chan struct{}
	err    error // why the reader stopped; read after done
	once   sync.Once
}

// dialWS opens a graphql-transport-ws connection and waits for connection_ack. A
// reader goroutine answers pings and queues every other frame.
func dialWS(t *testing.T, url string) *wsClient {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: wait}
	c, resp, err := d.Dial(url, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	resp.Body.Close()
	if p := c.Subprotocol(); p != "graphql-transport-ws" {
		c.Close()
		t.Fatalf("negotiated subprotocol %q", p)
	}
	w := &wsClient{t: t, c: c, frames: make(chan frame, 8192), quit: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(w.close)
	w.send(frame{Type: "connection_init", Payload: json.RawMessage(`{}`)})
	_ = c.SetReadDeadline(time.Now().Add(wait))
	for {
		var f frame
		if err := c.ReadJSON(&f); err != nil {
			t.Fatalf("waiting for connection_ack: %v", err)
		}
		if f.Type == "connection_ack" {
			break
		}
		if f.Type != "ping" && f.Type != "pong" {
			t.Fatalf("got %q before connection_ack", f.Type)
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	go w.read()
	return w
}

func (w *wsClient) read() {
	defer close(w.done)
	for {
		_, data, err := w.c.ReadMessage()
		if err != nil {
			w.err = err
			return
		}
		f := frame{at: time.Now()}
		if err := json.Unmarshal(data, &f); err != nil {
			w.err = fmt.Errorf("bad frame %q: %w", data, err)
			return
		}
		switch f.Type {
		case "ping":
			if err := w.write(frame{Type: "pong"}); err != nil {
				w.err = err
				return
			}
			continue
		case "pong":
			continue
		}
		select {
		case w.frames <- f:
		case <-w.quit:
			return
		}
	}
}

func (w *wsClient) write(f frame) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	_ = w.c.SetWriteDeadline(time.Now().Add(wait))
	return w.c.WriteJSON(f)
}

func (w *wsClient) send(f frame) {
	w.t.Helper()
	if err := w.write(f); err != nil {
		w.t.Fatalf("send %s: %v", f.Type, err)
	}
}

// subscribe starts staleNotices(watcher) under id; watcher "" means every watcher.
func (w *wsClient) subscribe(id, watcher string) {
	w.t.Helper()
	vars := map[string]any{}
	if watcher != "" {
		vars["w"] = watcher
	}
	payload, _ := json.Marshal(map[string]any{"query": noticeSubscription, "variables": vars})
	w.send(frame{Type: "subscribe", ID: id, Payload: payload})
}

func (w *wsClient) complete(id string) { w.send(frame{Type: "complete", ID: id}) }

// nextFrame returns the next frame, or ok=false when the connection ended or the
// timeout passed.
func (w *wsClient) nextFrame(timeout time.Duration) (frame, bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case f := <-w.frames:
		return f, true
	case <-w.done:
		select {
		case f := <-w.frames:
			return f, true
		default:
			return frame{}, false
		}
	case <-timer.C:
		return frame{}, false
	}
}

// nextNotice returns the next notice of subscription id, skipping the frames of other
// (completed) subscriptions; anything else for id is fatal.
func (w *wsClient) nextNotice(id string) (notice, time.Time) {
	w.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		f, ok := w.nextFrame(time.Until(deadline))
		if !ok {
			w.t.Fatalf("no notice for %q within %v (reader: %v)", id, wait, w.readerErr())
		}
		if f.ID != id {
			continue
		}
		if f.Type != "next" {
			w.t.Fatalf("got %s frame for %q: %s", f.Type, id, f.Payload)
		}
		return decodeNotice(w.t, f.Payload), f.at
	}
}

func decodeNotice(t *testing.T, payload json.RawMessage) notice {
	t.Helper()
	var p struct {
		Data struct {
			StaleNotices notice `json:"staleNotices"`
		} `json:"data"`
		Errors []gqlError `json:"errors"`
	}
	if err := json.Unmarshal(payload, &p); err != nil || len(p.Errors) > 0 {
		t.Fatalf("notice payload %s: %v %+v", payload, err, p.Errors)
	}
	return p.Data.StaleNotices
}

// none checks that no frame of subscription id arrives within the quiet window.
func (w *wsClient) none(id string) {
	w.t.Helper()
	deadline := time.Now().Add(quiet)
	for {
		f, ok := w.nextFrame(time.Until(deadline))
		if !ok {
			if time.Now().Before(deadline) {
				w.t.Fatalf("connection ended: %v", w.readerErr())
			}
			return
		}
		if f.ID == id {
			w.t.Fatalf("unexpected %s frame for %q: %s", f.Type, id, f.Payload)
		}
	}
}

func (w *wsClient) readerErr() error {
	select {
	case <-w.done:
		return w.err
	default:
		return nil
	}
}

// close closes the connection and waits for the reader.
func (w *wsClient) close() {
	w.once.Do(func() {
		close(w.quit)
		w.wmu.Lock()
		_ = w.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		w.wmu.Unlock()
		_ = w.c.Close()
		<-w.done
	})
}

// ---------------------------------------------------------------------------------------
// Misc

// withTimeout returns a context bounded by d and ended with the test.
func withTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
