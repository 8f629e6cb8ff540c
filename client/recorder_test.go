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
