package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// sseStream is one graphql-sse subscription ("distinct connections" mode) read raw.
type sseStream struct {
	resp   *http.Response
	events chan sseEvent // closed at the end of the stream
	end    chan error    // why the stream ended (nil: a clean end of the body)
}

type sseEvent struct{ event, data string }

// openSSE POSTs query with Accept: text/event-stream. The body is read on a goroutine
// only when read is true (a slow client reads nothing until drain).
func (s *server) openSSE(t *testing.T, token, query string, read bool) *sseStream {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query})
	req, err := http.NewRequest(http.MethodPost, s.base+"/query", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	st := &sseStream{resp: resp, events: make(chan sseEvent, 4096), end: make(chan error, 1)}
	if read {
		go st.read()
	}
	return st
}

func (st *sseStream) read() {
	sc := bufio.NewScanner(st.resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.event != "" {
				st.events <- ev
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			ev.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		}
	}
	st.end <- sc.Err()
	close(st.events)
}

// next returns the next event; ok is false when the stream ended.
func (st *sseStream) next(t *testing.T) (sseEvent, bool) {
	t.Helper()
	select {
	case e, ok := <-st.events:
		return e, ok
	case <-time.After(wait):
		t.Fatal("no SSE event within the wait")
	}
	return sseEvent{}, false
}

// Server-Sent Events under --auth-file: the same bearer token as HTTP (401 without),
// the same roles (an agent token cannot subscribe to another agent's notices), and
// the pending notice first.
func TestSSE_AuthRolesAndPendingFirst_NTC5(t *testing.T) {
	t.Parallel()
	s := startServerWith(t, filepath.Join(t.TempDir(), "awareness.db"), serverOpts{args: []string{"--auth-file", writeAuthFile(t, 0o600)}})
	sub := `subscription { staleNotices(watcher: "` + mainWatcher + `") { target changesSince } }`
	if st := s.openSSE(t, "", sub, false); st.resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("SSE without a token: %d, want 401", st.resp.StatusCode)
	}
	st := s.openSSE(t, opsToken, sub, true)
	e, _ := st.next(t)
	var r gqlResponse
	_ = json.Unmarshal([]byte(e.data), &r)
	if e.event != "next" || len(r.Errors) == 0 || r.Errors[0].Extensions["code"] != "FORBIDDEN" {
		t.Errorf("agent:ops subscribing to agent:main's notices: %s %s, want a FORBIDDEN error", e.event, e.data)
	}

	child := "agent:main:subagent:sse"
	s.mustDo(t, adminToken, recordMutation, map[string]any{"in": map[string]any{"sessionKey": child, "kind": "child_spawned", "actorType": "agent", "actorId": mainWatcher, "watchers": []string{mainWatcher}}}, nil)
	s.mustDo(t, adminToken, recordMutation, map[string]any{"in": map[string]any{"sessionKey": child, "kind": "human_direct_message", "actorType": "human"}}, nil)
	st = s.openSSE(t, adminToken, sub, true)
	if st.resp.StatusCode != http.StatusOK || st.resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("SSE with the admin token: %d %s", st.resp.StatusCode, st.resp.Header.Get("Content-Type"))
	}
	e, _ = st.next(t)
	if want := `{"data":{"staleNotices":{"target":"` + child + `","changesSince":1}}}`; e.event != "next" || e.data != want {
		t.Errorf("first SSE event = %s %s, want the pending notice %s", e.event, e.data, want)
	}
}

// At shutdown an SSE stream ends without its `complete` event, which would tell
// graphql-sse the subscription is over; ended so, the client retries (see
// TestDefaultClients_KeepNoticesAcrossRestart_NTC5).
func TestSSE_ShutdownEndsWithoutComplete(t *testing.T) {
	t.Parallel()
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	st := s.openSSE(t, "", `subscription { staleNotices { target } }`, true)
	s.spawn(t, "agent:main:subagent:sse-stop", mainWatcher)
	s.humanTurn(t, "agent:main:subagent:sse-stop")
	if e, _ := st.next(t); e.event != "next" {
		t.Fatalf("got %+v, want the notice", e)
	}
	began := time.Now()
	if ps := s.stop(syscall.SIGTERM); !ps.Success() {
		t.Fatalf("SIGTERM exit: %v", ps)
	}
	for {
		e, ok := st.next(t)
		if !ok {
			break
		}
		if e.event == "complete" {
			t.Fatal("the stream ended with complete at shutdown; graphql-sse would not reconnect")
		}
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("the stream ended %v after SIGTERM", d)
	}
}

// A slow SSE subscriber is dropped like a WebSocket one (the hub's bounded buffer, a
// bounded write): appends never wait for it, and its stream ends without `complete`,
// so graphql-sse reconnects and gets the pending notices again.
func TestSSE_SlowSubscriberEndsWithoutComplete(t *testing.T) {
	t.Parallel()
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	slow := s.openSSE(t, "", "subscription { staleNotices { "+bigNoticeSelection(200)+" } }", false)
	const appends, workers = 2000, 4
	jobs := make(chan int)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				_, err := s.record(map[string]any{
					"sessionKey": "agent:main:sseflood:t" + itoa(i), "kind": "human_direct_message", "actorType": "human",
					"watchers": []string{"agent:main:sseflood:w" + itoa(i)},
				})
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range appends {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("appends failed with a slow SSE subscriber: %v", tail(err.Error(), 1000))
	}
	go slow.read()
	got := 0
	deadline := time.After(60 * time.Second)
	for {
		select {
		case e, ok := <-slow.events:
			if !ok {
				err := <-slow.end
				if errors.Is(err, io.ErrUnexpectedEOF) || err == nil {
					err = errors.New("end of the body")
				}
				t.Logf("slow SSE subscriber: %d of %d notices before the server ended its stream (%v)", got, appends, err)
				if got >= appends {
					t.Errorf("the slow subscriber received all %d notices; it was never slow", got)
				}
				return
			}
			switch e.event {
			case "next":
				got++
			case "complete":
				t.Fatalf("the slow stream ended with complete after %d notices; graphql-sse would not reconnect", got)
			}
		case <-deadline:
			t.Fatalf("the slow SSE stream was still open after 60 s (%d notices read)", got)
		}
	}
}
