package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/awareness/awareness/client"
	"github.com/awareness/awareness/internal/models/pgtest"
)

// The Go client's notices against the real binary: CLT-5 (never dropped, never
// doubled), NTC-3 (the exact acknowledgement), NTC-5 (across restarts), on SQLite and
// PostgreSQL, over WebSocket and SSE.

// backend is a database for the tests that run on both: a SQLite file, or a fresh
// PostgreSQL database (TEST_DATABASE_URL; missing, it says so and skips, under CI it
// fails).
type backend struct {
	name string
	db   func(t *testing.T) string
}

var backends = []backend{
	{"sqlite", func(t *testing.T) string { return filepath.Join(t.TempDir(), "awareness.db") }},
	{"postgres", func(t *testing.T) string { return pgtest.NewDatabase(t) }},
}

// upgradeProxy is a loopback reverse proxy in front of a server that refuses every
// WebSocket upgrade while refuse is set (as a proxy without upgrade support does) and
// passes everything else, streaming SSE as it comes.
type upgradeProxy struct {
	*httptest.Server
	refuse  atomic.Bool
	refused atomic.Int64
}

func newUpgradeProxy(t *testing.T, backendAddr string) *upgradeProxy {
	t.Helper()
	target, _ := url.Parse("http://" + backendAddr)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	rp.ErrorLog = log.New(io.Discard, "", 0) // a stream cut by a restart is expected
	p := &upgradeProxy{}
	p.refuse.Store(true)
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "" && p.refuse.Load() {
			p.refused.Add(1)
			http.Error(w, "this proxy does not pass upgrades", http.StatusForbidden)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *upgradeProxy) endpoint() string { return p.URL + "/query" }

// startWatcher starts a Watcher with short backoffs and waits until it is connected.
func startWatcher(t *testing.T, c *client.Client, opts client.WatcherOptions, watchers ...string) *client.Watcher {
	t.Helper()
	if opts.MinBackoff == 0 {
		opts.MinBackoff, opts.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
	}
	w, err := c.Watch(watchers, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := w.WaitConnected(ctx); err != nil {
		t.Fatalf("watcher: %v (%v)", err, w.Err())
	}
	return w
}

// handouts counts what Drain handed out, per (watcher, target, notifiedVersion).
type handouts struct {
	mu  sync.Mutex
	n   map[string]int
	all int
}

func (h *handouts) add(ns []client.Notice) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	for _, n := range ns {
		h.n[fmt.Sprintf("%s %s@%d", n.Watcher, n.Target, n.NotifiedVersion)]++
		h.all++
	}
}

// twice returns the notices handed out more than once.
func (h *handouts) twice() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for k, v := range h.n {
		if v > 1 {
			out = append(out, fmt.Sprintf("%s ×%d", k, v))
		}
	}
	return out
}

// drainN drains watcher until n notices came, counting them in h.
func drainN(t *testing.T, w *client.Watcher, h *handouts, n int, watchers ...string) []client.Notice {
	t.Helper()
	var got []client.Notice
	deadline := time.After(wait)
	for len(got) < n {
		d := w.Drain(watchers...)
		h.add(d)
		got = append(got, d...)
		if len(got) >= n {
			break
		}
		select {
		case <-w.Notify():
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("drained %d notices, want %d: %+v (watcher error: %v)", len(got), n, got, w.Err())
		}
	}
	if len(got) != n {
		t.Fatalf("drained %d notices, want %d: %+v", len(got), n, got)
	}
	return got
}

// restartServer stops s with sig (SIGKILL or SIGTERM) and starts the binary again on
// the same database and address.
func restartServer(t *testing.T, s *server, sig syscall.Signal) *server {
	t.Helper()
	if sig == syscall.SIGKILL {
		s.kill()
	} else {
		s.stop(sig)
	}
	return startServerAt(t, s.db, s.addr)
}

// CLT-5, NTC-3, NTC-5: the service is killed (-9) or stopped (SIGTERM) between the
// Drain and the Ack, 20 rounds on each database and transport. Every notice is handed
// out once per opening, the exact Ack after the restart acknowledges it (with its
// follow-up when the target changed again meanwhile), and no notice is handed out
// twice.
func TestClient_DrainRestartAck_NoNoticeTwice_CLT5_NTC3_NTC5(t *testing.T) {
	for _, b := range backends {
		for _, tr := range []client.Transport{client.TransportWebSocket, client.TransportSSE} {
			t.Run(b.name+"/"+tr.String(), func(t *testing.T) {
				db := b.db(t)
				addr := freeAddr(t)
				s := startServerAt(t, db, addr)
				c := newClient(t, addr, client.WithTimeout(5*time.Second))
				const a, b2 = "agent:main:subagent:r1", "agent:main:subagent:r2"
				s.spawn(t, a, mainWatcher)
				s.spawn(t, b2, mainWatcher)
				w := startWatcher(t, c, client.WatcherOptions{Transport: tr}, mainWatcher)
				var h handouts
				followUps := 0
				// Two notices open before each round: a's (its follow-up from round 1
				// on) and b2's.
				s.humanTurn(t, a)
				s.humanTurn(t, b2)
				for round := range 20 {
					drained := drainN(t, w, &h, 2)
					// Target a changes again after the Drain: its Ack opens a follow-up.
					s.humanTurn(t, a)
					sig := syscall.SIGKILL
					if round%2 == 1 {
						sig = syscall.SIGTERM
					}
					s = restartServer(t, s, sig)
					acks, err := w.Ack(context.Background(), drained)
					if err != nil {
						t.Fatalf("round %d (%v): Ack after the restart: %v", round, sig, err)
					}
					for _, ack := range acks {
						if ack.Outcome != client.AckAcknowledged {
							t.Fatalf("round %d (%v): the exact Ack of %s@%d after the restart: %s, want acknowledged",
								round, sig, ack.Target, ack.NotifiedVersion, ack.Outcome)
						}
						if ack.Target == a && ack.FollowUp == nil {
							t.Fatalf("round %d: no follow-up for %s, which changed after the Drain", round, a)
						}
						if ack.FollowUp != nil {
							followUps++
						}
					}
					// b2 changes so that every round has two notices to drain.
					s.humanTurn(t, b2)
				}
				last := drainN(t, w, &h, 2)
				if _, err := w.Ack(context.Background(), last); err != nil {
					t.Fatal(err)
				}
				time.Sleep(quiet)
				if extra := w.Drain(); len(extra) != 0 {
					h.add(extra)
					t.Errorf("after the last Ack Drain handed out %+v", extra)
				}
				if p := s.pendingNotices(t, mainWatcher); len(p) != 0 {
					t.Errorf("pending after acknowledging everything drained: %+v", p)
				}
				if tw := h.twice(); len(tw) != 0 {
					t.Errorf("notices handed out twice: %v", tw)
				}
				want := 2 + 20*2
				if h.all != want {
					t.Errorf("handed out %d notices over 20 rounds, want %d (one per opening)", h.all, want)
				}
				t.Logf("%s/%s: 20 restarts between Drain and Ack, %d notices handed out (%d follow-ups), %d twice, %d replays dropped",
					b.name, tr, h.all, followUps, len(h.twice()), w.Duplicates())
			})
		}
	}
}

// CLT-5: a turn that fails after its Drain releases what it drained, and the notice
// is drained again: after Release; after Release once the service restarted (the
// stream's replay of the held notice was dropped); and by a new Watcher when the
// gateway restarts without acknowledging.
func TestClient_ReleasedNoticeIsDrainedAgain_CLT5(t *testing.T) {
	for _, b := range backends {
		for _, tr := range []client.Transport{client.TransportWebSocket, client.TransportSSE} {
			t.Run(b.name+"/"+tr.String(), func(t *testing.T) {
				db := b.db(t)
				addr := freeAddr(t)
				s := startServerAt(t, db, addr)
				c := newClient(t, addr)
				const child = "agent:main:subagent:rel"
				s.spawn(t, child, mainWatcher)
				w := startWatcher(t, c, client.WatcherOptions{Transport: tr}, mainWatcher)
				var h handouts
				s.humanTurn(t, child)
				first := drainN(t, w, &h, 1)

				if n := w.Release(first...); n != 1 {
					t.Fatalf("Release handed back %d notices, want 1", n)
				}
				again := drainN(t, w, &h, 1)
				if again[0] != first[0] {
					t.Fatalf("drained again %+v, want %+v", again[0], first[0])
				}

				dups := w.Duplicates()
				s = restartServer(t, s, syscall.SIGKILL)
				waitFor(t, wait, "the replay of the held notice after the restart", func() bool { return w.Duplicates() > dups })
				if got := w.Drain(); len(got) != 0 {
					t.Fatalf("a held notice was handed out again after the restart: %+v", got)
				}
				w.Release(again...)
				third := drainN(t, w, &h, 1)
				if third[0].NotifiedVersion != first[0].NotifiedVersion || third[0].Text != first[0].Text {
					t.Fatalf("after the restart and Release: %+v, want the same notice %+v (NTC-5)", third[0], first[0])
				}

				// The gateway restarts without acknowledging: a new Watcher gets it again.
				_ = w.Close()
				w2 := startWatcher(t, c, client.WatcherOptions{Transport: tr}, mainWatcher)
				fourth := drainN(t, w2, &h, 1)
				acks, err := w2.Ack(context.Background(), fourth)
				if err != nil || len(acks) != 1 || acks[0].Outcome != client.AckAcknowledged {
					t.Fatalf("Ack of the notice drained by the new Watcher: %+v, %v", acks, err)
				}
				if p := s.pendingNotices(t, mainWatcher); len(p) != 0 {
					t.Fatalf("pending after the Ack: %+v", p)
				}
			})
		}
	}
}

// CLT-5, NTC-3: Ack while the service is down fails with ErrAckDeferred and keeps
// the notice held; once the service is up the Watcher sends the acknowledgement again
// by itself, and the notice is acknowledged once and never handed out again.
func TestClient_AckWhileServiceDown_AcknowledgedOnce_CLT5(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			db := b.db(t)
			addr := freeAddr(t)
			s := startServerAt(t, db, addr)
			c := newClient(t, addr, client.WithTimeout(time.Second))
			const child = "agent:main:subagent:down"
			s.spawn(t, child, mainWatcher)
			acked := make(chan client.NoticeAck, 8)
			w := startWatcher(t, c, client.WatcherOptions{OnAck: func(a client.NoticeAck) { acked <- a }}, mainWatcher)
			var h handouts
			s.humanTurn(t, child)
			drained := drainN(t, w, &h, 1)
			s.kill()
			_, err := w.Ack(context.Background(), drained)
			if !errors.Is(err, client.ErrAckDeferred) {
				t.Fatalf("Ack with the service down: %v, want ErrAckDeferred", err)
			}
			if held := w.Held(); len(held) != 1 {
				t.Fatalf("after the failed Ack %d notices are held, want 1", len(held))
			}
			time.Sleep(300 * time.Millisecond) // a few retries fail
			s = startServerAt(t, db, addr)
			select {
			case a := <-acked:
				if a.Outcome != client.AckAcknowledged || a.NotifiedVersion != drained[0].NotifiedVersion {
					t.Fatalf("the retried acknowledgement: %+v", a)
				}
			case <-time.After(wait):
				t.Fatalf("the Watcher did not send the acknowledgement again (err %v)", w.Err())
			}
			select {
			case a := <-acked:
				t.Fatalf("a second acknowledgement outcome: %+v", a)
			case <-time.After(quiet):
			}
			if err := w.WaitConnected(withTimeout(t, wait)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(quiet)
			if got := w.Drain(); len(got) != 0 {
				t.Fatalf("the acknowledged notice was handed out again: %+v", got)
			}
			if p := s.pendingNotices(t, mainWatcher); len(p) != 0 {
				t.Fatalf("pending after the retried Ack: %+v", p)
			}
			if len(w.Held()) != 0 {
				t.Fatalf("still held: %+v", w.Held())
			}
		})
	}
}

// CLT-5, SIG-2: an event the service would refuse is refused by Record at once, with
// the service's code, and nothing enters the outbox; the service would have refused
// it the same way.
func TestClient_RecordRefusesWhatTheServiceRefuses_CLT5(t *testing.T) {
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	c := newClient(t, s.addr)
	path := filepath.Join(t.TempDir(), "outbox")
	rec, err := c.OpenRecorder(path, client.RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	const key = "agent:main:subagent:refused"
	for name, ev := range map[string]client.Event{
		"misspelt kind":         {SessionKey: key, Kind: "human_direct_mesage", ActorType: "human"},
		"two-line summary":      {SessionKey: key, Kind: "compacted", ActorType: "system", Summary: "one\ntwo"},
		"unknown actor type":    {SessionKey: key, Kind: "compacted", ActorType: "robot"},
		"outcome on compacted":  {SessionKey: key, Kind: "compacted", ActorType: "system", Outcome: "error"},
		"unknown outcome":       {SessionKey: key, Kind: "run_failed", ActorType: "system", Outcome: "exploded"},
		"malformed key":         {SessionKey: "agent:Main", Kind: "compacted", ActorType: "system"},
		"turns below one":       {SessionKey: key, Kind: "compacted", ActorType: "system", Turns: -1},
		"control in the run id": {SessionKey: key, Kind: "compacted", ActorType: "system", RunID: "a\x01b"},
	} {
		t0 := time.Now()
		err := rec.Record(context.Background(), ev)
		if client.ErrorCode(err) != client.CodeInvalidArgument {
			t.Errorf("%s: Record returned %v, want INVALID_ARGUMENT", name, err)
			continue
		}
		if d := time.Since(t0); d > 100*time.Millisecond {
			t.Errorf("%s: the refusal took %v", name, d)
		}
		// The service refuses the same event with the same code.
		ev.DedupeKey = "x"
		var res any
		serr := c.Do(context.Background(), `mutation($in: RecordEventInput!) { recordEvent(input: $in) { recorded } }`, map[string]any{"in": ev}, &res)
		if code := client.ErrorCode(serr); code != client.CodeInvalidArgument && code != "GRAPHQL_VALIDATION_FAILED" {
			t.Errorf("%s: the service answered %v, which Record does not mirror", name, serr)
		}
	}
	if p := rec.Pending(); p != 0 {
		t.Fatalf("%d refused events entered the outbox", p)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Fatalf("the outbox file holds %d bytes after refusals only (%v)", fi.Size(), err)
	}
	if ids := runIDs(t, c, key); len(ids) != 0 {
		t.Fatalf("the log of %s holds %v", key, ids)
	}
}

// CLT-2, CLT-5: a token the service refuses stops delivery and says so (Errors, Err,
// ErrDeliveryStopped) instead of retrying silently; the events stay in the outbox and
// a Recorder with a valid token delivers them once.
func TestClient_RecorderWrongTokenStopsDelivery_CLT5(t *testing.T) {
	dir := t.TempDir()
	s := startServerWith(t, filepath.Join(dir, "awareness.db"), serverOpts{args: []string{"--auth-file", writeAuthFile(t, 0o600)}})
	path := filepath.Join(dir, "outbox")
	bad := newClient(t, s.addr, client.WithToken("wrong-token-0123456789abcdef012345678"))
	rec, err := bad.OpenRecorder(path, client.RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const key = "agent:main:subagent:tok"
	for i := range 3 {
		if err := rec.Record(context.Background(), client.Event{SessionKey: key, Kind: "compacted", ActorType: "system", RunID: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-rec.Errors():
		if !errors.Is(err, client.ErrDeliveryStopped) || client.ErrorCode(err) != client.CodeUnauthenticated {
			t.Fatalf("Errors: %v, want ErrDeliveryStopped with UNAUTHENTICATED", err)
		}
	case <-time.After(wait):
		t.Fatal("the refused token did not reach Errors")
	}
	if !errors.Is(rec.Err(), client.ErrDeliveryStopped) {
		t.Fatalf("Err: %v", rec.Err())
	}
	time.Sleep(quiet)
	if p := rec.Pending(); p != 3 {
		t.Fatalf("%d events pending after delivery stopped, want 3", p)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	ok := newClient(t, s.addr, client.WithToken(adminToken))
	rec2, err := ok.OpenRecorder(path, client.RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rec2.Close()
	if err := rec2.Flush(withTimeout(t, wait)); err != nil {
		t.Fatal(err)
	}
	if ids := runIDs(t, ok, key); len(ids) != 3 {
		t.Fatalf("the log holds %v, want the 3 events once", ids)
	}
}

// CLT-5: behind a proxy that refuses WebSocket upgrades, a WebSocket-only Watcher
// says why it cannot connect (Err, Errors: the status); TransportAuto follows the
// notices over SSE (the refusal, with its status, reaches Errors), a notice arrives
// within 2 s of its event, and once the proxy passes upgrades the Watcher goes back
// to WebSocket, handing nothing out twice.
func TestClient_WatcherFallsBackToSSE_CLT5(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			s := startServer(t, b.db(t))
			p := newUpgradeProxy(t, s.addr)
			c, err := client.New(p.endpoint())
			if err != nil {
				t.Fatal(err)
			}
			const child = "agent:main:subagent:sse"
			s.spawn(t, child, mainWatcher)

			// WebSocket only: the refusal, with its status, is in Err and Errors.
			wsOnly, err := c.Watch([]string{mainWatcher}, client.WatcherOptions{Transport: client.TransportWebSocket, MinBackoff: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			if err := wsOnly.WaitConnected(ctx); err == nil {
				t.Fatal("a WebSocket-only Watcher connected through a proxy that refuses upgrades")
			}
			cancel()
			if se, ok := errors.AsType[*client.StreamError](wsOnly.Err()); !ok || se.Status != http.StatusForbidden || se.Fatal {
				t.Fatalf("Err of the WebSocket-only Watcher: %v, want the refused upgrade with its status", wsOnly.Err())
			}
			if err := <-wsOnly.Errors(); client.ErrorCode(err) != "" || !errors.As(err, new(*client.StreamError)) {
				t.Fatalf("Errors of the WebSocket-only Watcher: %v", err)
			}
			_ = wsOnly.Close()

			w := startWatcher(t, c, client.WatcherOptions{WebSocketRetry: 500 * time.Millisecond}, mainWatcher)
			if tr := w.Transport(); tr != client.TransportSSE {
				t.Fatalf("behind the refusing proxy the transport is %v", tr)
			}
			select {
			case err := <-w.Errors():
				if se, ok := errors.AsType[*client.StreamError](err); !ok || se.Status != http.StatusForbidden {
					t.Fatalf("Errors: %v, want the refused upgrade with its status", err)
				}
			default:
				t.Fatal("the refused upgrade did not reach Errors")
			}
			var h handouts
			t0 := time.Now()
			s.humanTurn(t, child)
			n := drainN(t, w, &h, 1)
			if d := time.Since(t0); d > 2*time.Second {
				t.Errorf("the notice took %v over SSE, want at most 2 s", d)
			}
			t.Logf("notice over SSE %v after its event", time.Since(t0))
			if _, err := w.Ack(context.Background(), n); err != nil {
				t.Fatal(err)
			}

			p.refuse.Store(false)
			waitFor(t, wait, "the Watcher back on WebSocket", func() bool { return w.Transport() == client.TransportWebSocket && w.Err() == nil })
			s.humanTurn(t, child)
			drainN(t, w, &h, 1)
			time.Sleep(quiet)
			if tw := h.twice(); len(tw) != 0 || len(w.Drain()) != 0 {
				t.Fatalf("handed out twice across the switch: %v", tw)
			}
		})
	}
}

// CLT-5, NTC-5 over SSE behind the refusing proxy: the service is killed between a
// Drain and its Ack; the held notice's replay is dropped, the Ack after the restart
// acknowledges it, and a notice that opens after the restart arrives over SSE.
func TestClient_WatcherSSEAcrossRestart_CLT5_NTC5(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			db := b.db(t)
			addr := freeAddr(t)
			s := startServerAt(t, db, addr)
			p := newUpgradeProxy(t, addr)
			c, err := client.New(p.endpoint(), client.WithTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			const child = "agent:main:subagent:sser"
			s.spawn(t, child, mainWatcher)
			w := startWatcher(t, c, client.WatcherOptions{}, mainWatcher)
			var h handouts
			s.humanTurn(t, child)
			drained := drainN(t, w, &h, 1)
			dups := w.Duplicates()
			s = restartServer(t, s, syscall.SIGKILL)
			waitFor(t, wait, "the replay over SSE after the restart", func() bool { return w.Duplicates() > dups })
			acks, err := w.Ack(context.Background(), drained)
			if err != nil || len(acks) != 1 || acks[0].Outcome != client.AckAcknowledged {
				t.Fatalf("Ack after the restart: %+v, %v", acks, err)
			}
			s.humanTurn(t, child)
			drainN(t, w, &h, 1)
			time.Sleep(quiet)
			if got := w.Drain(); len(got) != 0 || len(h.twice()) != 0 {
				t.Fatalf("handed out twice: %v %+v", h.twice(), got)
			}
			if tr := w.Transport(); tr != client.TransportSSE {
				t.Fatalf("transport %v behind the refusing proxy", tr)
			}
		})
	}
}

// The watcher sessions of one Watcher change on its connection: Add subscribes a new
// one (refused at once when the token may not read it), Remove stops one, and each
// has its own notification channel; on WebSocket and SSE.
func TestClient_WatcherAddRemove_CLT5(t *testing.T) {
	for _, b := range backends {
		for _, tr := range []client.Transport{client.TransportWebSocket, client.TransportSSE} {
			t.Run(b.name+"/"+tr.String(), func(t *testing.T) {
				s := startServer(t, b.db(t))
				c := newClient(t, s.addr)
				const other = "agent:main:other"
				const c1, c2 = "agent:main:subagent:ar1", "agent:main:subagent:ar2"
				ctx := context.Background()
				s.spawn(t, c1, mainWatcher)
				if r, err := c.WatchTarget(ctx, other, client.Target{SessionKey: c2}); err != nil || !r.Watched || r.Cursor == nil {
					t.Fatalf("WatchTarget: %+v, %v", r, err)
				}
				w := startWatcher(t, c, client.WatcherOptions{Transport: tr})
				if err := w.Add(ctx, mainWatcher); err != nil {
					t.Fatal(err)
				}
				if err := w.WaitConnected(withTimeout(t, wait)); err != nil {
					t.Fatal(err)
				}
				var h handouts
				s.humanTurn(t, c1)
				select {
				case <-w.NotifyOf(mainWatcher):
				case <-time.After(wait):
					t.Fatal("NotifyOf(main) was not signalled")
				}
				drainN(t, w, &h, 1, mainWatcher)
				if err := w.Add(ctx, other); err != nil {
					t.Fatal(err)
				}
				if err := w.WaitConnected(withTimeout(t, wait)); err != nil {
					t.Fatal(err)
				}
				w.Remove(mainWatcher)
				if got := w.Watchers(); len(got) != 1 || got[0] != other {
					t.Fatalf("Watchers: %v", got)
				}
				s.humanTurn(t, c2)
				got := drainN(t, w, &h, 1)
				if got[0].Watcher != other {
					t.Fatalf("drained %+v, want the notice of %s", got[0], other)
				}
				s.humanTurn(t, c1) // main is not followed any more
				time.Sleep(quiet)
				if extra := w.Drain(); len(extra) != 0 {
					t.Fatalf("a removed watcher's notice was handed out: %+v", extra)
				}
				pending, err := c.PendingNotices(ctx, other)
				if err != nil || len(pending) != 1 {
					t.Fatalf("PendingNotices(other): %+v, %v", pending, err)
				}
				if ok, err := c.UnwatchTarget(ctx, other, client.Target{SessionKey: c2}); err != nil || !ok {
					t.Fatalf("UnwatchTarget: %v, %v", ok, err)
				}
				if err := w.Add(ctx, "agent:main"); client.ErrorCode(err) != client.CodeInvalidArgument {
					t.Fatalf("Add of a malformed watcher: %v, want INVALID_ARGUMENT", err)
				}
			})
		}
	}
}

// NTC-3: Ack says what it did with each drained notice: alreadyAcknowledged when
// another client acknowledged it first (with the pair's newer pending notice, kept for
// the next Drain), notPending when its cursor went away (unwatch).
func TestClient_AckOutcomes_NTC3(t *testing.T) {
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	c := newClient(t, s.addr)
	ctx := context.Background()
	const c1, c2 = "agent:main:subagent:o1", "agent:main:subagent:o2"
	s.spawn(t, c1, mainWatcher)
	s.spawn(t, c2, mainWatcher)
	w := startWatcher(t, c, client.WatcherOptions{}, mainWatcher)
	var h handouts
	s.humanTurn(t, c1)
	s.humanTurn(t, c2)
	drained := drainN(t, w, &h, 2)
	var n1, n2 client.Notice
	for _, n := range drained {
		if n.Target == c1 {
			n1 = n
		} else {
			n2 = n
		}
	}
	// Another gateway acknowledges n1, and the person types into c1 again.
	if acks, err := c.AcknowledgeNotices(ctx, mainWatcher, []client.Notice{n1}); err != nil || len(acks) != 1 || acks[0].Outcome != client.AckAcknowledged {
		t.Fatalf("the other gateway's AcknowledgeNotices: %+v, %v", acks, err)
	}
	s.humanTurn(t, c1)
	// c2's cursor goes away.
	if ok, err := c.UnwatchTarget(ctx, mainWatcher, client.Target{SessionKey: c2}); err != nil || !ok {
		t.Fatalf("UnwatchTarget: %v, %v", ok, err)
	}
	acks, err := w.Ack(ctx, drained)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]client.NoticeAck{}
	for _, a := range acks {
		got[a.Target] = a
	}
	if a := got[c1]; a.Outcome != client.AckAlreadyAcknowledged || a.Pending == nil || a.Pending.NotifiedVersion <= n1.NotifiedVersion {
		t.Errorf("Ack of %s acknowledged elsewhere: %+v, want alreadyAcknowledged with the newer pending notice", c1, a)
	}
	if a := got[c2]; a.Outcome != client.AckNotPending || a.NotifiedVersion != n2.NotifiedVersion {
		t.Errorf("Ack of %s after unwatch: %+v, want notPending", c2, a)
	}
	if held := w.Held(); len(held) != 0 {
		t.Errorf("still held after Ack: %+v", held)
	}
	next := drainN(t, w, &h, 1)
	if next[0].Target != c1 || next[0].NotifiedVersion <= n1.NotifiedVersion {
		t.Fatalf("next Drain: %+v, want c1's newer notice", next[0])
	}
	time.Sleep(quiet)
	if extra := w.Drain(); len(extra) != 0 || len(h.twice()) != 0 {
		t.Fatalf("handed out twice: %v %+v", h.twice(), extra)
	}
}
