package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// deadEndpoint returns a client of an address nobody listens on: every delivery
// fails, so everything recorded stays in the outbox.
func deadEndpoint(t testing.TB) *Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, err := New("http://"+addr+"/query", WithTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ev(key string, i int) Event {
	return Event{SessionKey: key, Kind: "compacted", ActorType: "system", RunID: fmt.Sprint(i)}
}

// The outbox survives a reopen with its order, drops nothing, holds one lock, and
// refuses past its bound with ErrOutboxFull.
func TestRecorder_OutboxReopenOrderLockAndBound(t *testing.T) {
	c := deadEndpoint(t)
	path := filepath.Join(t.TempDir(), "outbox")
	r, err := c.OpenRecorder(path, RecorderOptions{MaxBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.OpenRecorder(path, RecorderOptions{}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a second recorder on the same outbox: %v, want in use", err)
	}
	n := 0
	for ; ; n++ {
		err := r.Record(context.Background(), ev("agent:main:subagent:x", n))
		if errors.Is(err, ErrOutboxFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if n < 100 {
		t.Fatalf("only %d events fit in 64 KiB", n)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	// A torn last line (a crash mid-write) is ignored on open.
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	_, _ = f.WriteString(`{"id":99999,"e":{"sessionKey":"agent:main:subagent:x","ki`)
	f.Close()
	r2, err := c.OpenRecorder(path, RecorderOptions{MaxBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if got := r2.Pending(); got != n {
		t.Fatalf("reopened outbox holds %d events, want %d", got, n)
	}
	r2.mu.Lock()
	var ids []string
	for _, l := range r2.lanes {
		for _, s := range l.queue {
			ids = append(ids, s.ev.RunID)
		}
	}
	r2.mu.Unlock()
	for i, id := range ids {
		if id != fmt.Sprint(i) {
			t.Fatalf("replay order: position %d holds run %s", i, id)
		}
	}
	if err := r2.Record(context.Background(), ev("agent:main:subagent:x", n)); !errors.Is(err, ErrOutboxFull) {
		t.Fatalf("Record on a full reopened outbox: %v, want ErrOutboxFull", err)
	}
}

// BenchmarkRecorderRecord measures Record with its fsync (the service is down, so
// every event stays spooled), from 8 goroutines sharing fsyncs.
//
//	go test -run NONE -bench RecorderRecord -benchtime 3s ./client/
func BenchmarkRecorderRecord(b *testing.B) {
	c := deadEndpoint(b)
	r, err := c.OpenRecorder(filepath.Join(b.TempDir(), "outbox"), RecorderOptions{MaxBytes: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N/8 + 1
	start := time.Now()
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				if err := r.Record(context.Background(), ev(fmt.Sprintf("agent:main:subagent:b%d", g), i)); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(8*per)/time.Since(start).Seconds(), "records/s")
}

// BenchmarkRecorderRecordSerial is one goroutine: one fsync per Record.
func BenchmarkRecorderRecordSerial(b *testing.B) {
	c := deadEndpoint(b)
	r, err := c.OpenRecorder(filepath.Join(b.TempDir(), "outbox"), RecorderOptions{MaxBytes: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		if err := r.Record(context.Background(), ev("agent:main:subagent:s", i)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
}

// fakeService answers every recordEvent as recorded, counting the dedupeKeys seen.
func fakeService(t *testing.T) (*Client, func() int) {
	t.Helper()
	var mu sync.Mutex
	keys := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Variables struct {
				In []Event `json:"in"`
			} `json:"variables"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		var items []string
		mu.Lock()
		for i, e := range req.Variables.In {
			keys[e.DedupeKey] = true
			items = append(items, fmt.Sprintf(`{"index":%d,"result":{"recorded":true,"stateVersion":1,"event":{"sequence":1},"skippedWatchers":[]},"error":null}`, i))
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"data":{"recordEvents":[`+strings.Join(items, ",")+`]}}`)
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL + "/query")
	if err != nil {
		t.Fatal(err)
	}
	return c, func() int { mu.Lock(); defer mu.Unlock(); return len(keys) }
}

// Delivered events are compacted out of the outbox file once it passes its
// compaction size, and a reopened outbox holds nothing delivered.
func TestRecorder_CompactsDeliveredEvents(t *testing.T) {
	c, delivered := fakeService(t)
	path := filepath.Join(t.TempDir(), "outbox")
	r, err := c.OpenRecorder(path, RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.wmu.Lock()
	r.compactAt = 64 << 10
	r.wmu.Unlock()
	summary, actor := strings.Repeat("x", 200), "user:"+strings.Repeat("y", 400)
	const n = 800 // about 600 KiB of lines
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n / 8 {
				e := ev(fmt.Sprintf("agent:main:subagent:c%d", g), i)
				e.Summary, e.ActorID = summary, actor
				if err := r.Record(context.Background(), e); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.Flush(ctx); err != nil {
		t.Fatalf("%v: %d pending, %d delivered", err, r.Pending(), delivered())
	}
	if got := delivered(); got != n {
		t.Fatalf("the service saw %d distinct events, want %d", got, n)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 128<<10 {
		t.Errorf("the outbox is %d bytes after delivering everything: not compacted", fi.Size())
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2, err := c.OpenRecorder(path, RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if p := r2.Pending(); p != 0 {
		t.Fatalf("a reopened outbox holds %d delivered events", p)
	}
}

// batchService is a fake service answering recordEvents with answer(request number,
// inputs): the JSON of the answer. It records every input it was sent.
type batchService struct {
	mu     sync.Mutex
	reqs   int
	sent   [][]Event
	answer func(req int, in []Event) string
}

func newBatchService(t *testing.T, answer func(req int, in []Event) string) (*Client, *batchService) {
	t.Helper()
	b := &batchService{answer: answer}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Query     string `json:"query"`
			Variables struct {
				In []Event `json:"in"`
			} `json:"variables"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		b.mu.Lock()
		b.reqs++
		n := b.reqs
		b.sent = append(b.sent, req.Variables.In)
		b.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, b.answer(n, req.Variables.In))
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL + "/query")
	if err != nil {
		t.Fatal(err)
	}
	return c, b
}

// okItems answers every input as recorded, except those refused by refuse (an
// InputError code, or "").
func okItems(in []Event, refuse func(Event) string) string {
	var items []string
	for i, e := range in {
		if code := refuse(e); code != "" {
			items = append(items, fmt.Sprintf(`{"index":%d,"result":null,"error":{"code":%q,"message":"refused"}}`, i, code))
			continue
		}
		items = append(items, fmt.Sprintf(`{"index":%d,"result":{"recorded":true,"stateVersion":1,"event":{"sequence":1},"skippedWatchers":[]},"error":null}`, i))
	}
	return `{"data":{"recordEvents":[` + strings.Join(items, ",") + `]}}`
}

// The replay posts batches of at most MaxBatch, waits the retryAfterMs of
// RATE_LIMITED (not a growing backoff), goes on after an input the service could not
// take now from that input, drops (and reports) an input refused for good, and keeps
// every session's order.
func TestRecorder_BatchesRetryAfterAndRefusals(t *testing.T) {
	var refusedOnce sync.Once
	c, svc := newBatchService(t, func(req int, in []Event) string {
		if req <= 3 {
			return `{"errors":[{"message":"slow down","extensions":{"code":"RATE_LIMITED","retryAfterMs":40}}],"data":null}`
		}
		transient := ""
		return okItems(in, func(e Event) string {
			switch {
			case e.RunID == "forbidden":
				return "FORBIDDEN"
			case e.RunID == "7" && transient == "":
				refused := false
				refusedOnce.Do(func() { refused = true })
				if refused {
					transient = "UNAVAILABLE"
					return transient
				}
			case transient != "":
				return transient // after the outage inside the batch, nothing is taken
			}
			return ""
		})
	})
	rec, err := c.OpenRecorder(filepath.Join(t.TempDir(), "outbox"), RecorderOptions{Senders: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	const key = "agent:main:subagent:batch"
	const n = 450
	for i := range n {
		e := ev(key, i)
		if i == 100 {
			e.RunID = "forbidden"
		}
		if err := rec.Record(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now()
	if err := rec.Flush(withDeadline(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("delivery took %v: RATE_LIMITED's retryAfterMs of 40 ms was not what it waited", d)
	}
	select {
	case err := <-rec.Errors():
		if de, ok := errors.AsType[*DeliveryError](err); !ok || de.Event.RunID != "forbidden" || ErrorCode(err) != CodeForbidden {
			t.Fatalf("Errors: %v, want the FORBIDDEN event's DeliveryError", err)
		}
	default:
		t.Fatal("the refused event did not reach Errors")
	}
	// The service took each input once it answered it, in order.
	svc.mu.Lock()
	defer svc.mu.Unlock()
	taken := map[string]int{}
	var order []string
	for r, batch := range svc.sent {
		if len(batch) > MaxBatch {
			t.Fatalf("request %d carried %d events", r, len(batch))
		}
		if r < 3 {
			continue // refused whole
		}
		for _, e := range batch {
			if taken[e.DedupeKey] == 0 {
				order = append(order, e.RunID)
			}
			taken[e.DedupeKey]++
		}
	}
	if len(order) != n {
		t.Fatalf("the service saw %d distinct events, want %d", len(order), n)
	}
	for i, id := range order {
		want := fmt.Sprint(i)
		if i == 100 {
			want = "forbidden"
		}
		if id != want {
			t.Fatalf("position %d: run %s, want %s", i, id, want)
		}
	}
}

// A retried Record after ErrRecordTimeout reuses the attempt's dedupeKey, so the
// service records the event once; a later Record of the same event is a new event.
func TestRecorder_RetryAfterTimeoutKeepsTheDedupeKey(t *testing.T) {
	c := deadEndpoint(t)
	r, err := c.OpenRecorder(filepath.Join(t.TempDir(), "outbox"), RecorderOptions{RecordTimeout: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	e := ev("agent:main:subagent:retry", 1)
	var timedOut int
	for range 3 {
		if err := r.Record(context.Background(), e); errors.Is(err, ErrRecordTimeout) {
			timedOut++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if timedOut == 0 {
		t.Skip("no Record timed out at a 1 ns bound")
	}
	waitUntil(t, func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.pending) == 3 })
	r.mu.Lock()
	keys := map[string]bool{}
	for _, s := range r.pending {
		keys[s.ev.DedupeKey] = true
	}
	r.mu.Unlock()
	// Every attempt after a timeout reused the key; the first that returned nil
	// closed the retry, so a later Record would get a new one.
	if len(keys) != 1 && timedOut == 3 {
		t.Fatalf("three timed-out attempts of one event spooled %d dedupeKeys", len(keys))
	}
	if len(keys) > 3-timedOut+1 {
		t.Fatalf("%d timed-out attempts, %d dedupeKeys", timedOut, len(keys))
	}
}

// Record refuses at once what the service would refuse, with the service's message,
// and spools nothing.
func TestRecorder_RecordValidates_CLT5(t *testing.T) {
	c := deadEndpoint(t)
	r, err := c.OpenRecorder(filepath.Join(t.TempDir(), "outbox"), RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	err = r.Record(context.Background(), Event{SessionKey: "agent:main:subagent:v", Kind: "compacted", ActorType: "system", Summary: "a\nb"})
	if e, ok := errors.AsType[*Error](err); !ok || e.Code != CodeInvalidArgument || e.Message != "summary must be one line" {
		t.Fatalf("Record of a two-line summary: %v", err)
	}
	if r.Pending() != 0 {
		t.Fatal("a refused event was spooled")
	}
}

func withDeadline(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}
