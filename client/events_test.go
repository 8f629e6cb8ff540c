package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// FEED-1, FEED-2: over SSE, an EventFeed sends the sequence it resumes after as
// Last-Event-ID (not afterSequence) on every reconnection, hands out each event once
// with the markers, and ends for good with HISTORY_GAP's earliest sequence.
func TestEventFeed_SSEResumesWithLastEventID_FEED1_FEED2(t *testing.T) {
	var (
		mu      sync.Mutex
		lastIDs []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		lastIDs = append(lastIDs, r.Header.Get("Last-Event-ID"))
		n := len(lastIDs)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		switch n {
		case 1: // the replay of 3, synced, then the connection is lost
			for seq := 3; seq <= 4; seq++ {
				fmt.Fprintf(w, "event: next\nid: %d\ndata: {\"data\":{\"stateEventFeed\":{\"__typename\":\"StateEvent\",\"sequence\":%d,\"kind\":\"run_completed\"}}}\n\n", seq, seq)
			}
			fmt.Fprint(w, "event: next\nid: 4\ndata: {\"data\":{\"stateEventFeed\":{\"__typename\":\"FeedSynced\",\"lastSequence\":4,\"replayed\":2,\"at\":\"2026-03-01T12:00:00Z\"}}}\n\n")
		case 2: // resumed after 4
			fmt.Fprint(w, "event: next\nid: 4\ndata: {\"data\":{\"stateEventFeed\":{\"__typename\":\"FeedSynced\",\"lastSequence\":4,\"replayed\":0,\"at\":\"2026-03-01T12:00:01Z\"}}}\n\n")
			fmt.Fprint(w, "event: next\nid: 5\ndata: {\"data\":{\"stateEventFeed\":{\"__typename\":\"StateEvent\",\"sequence\":5,\"kind\":\"run_completed\"}}}\n\n")
		default:
			fmt.Fprint(w, "event: next\ndata: {\"errors\":[{\"message\":\"pruned\",\"extensions\":{\"code\":\"HISTORY_GAP\",\"earliestAvailableSequence\":9}}]}\n\nevent: complete\n\n")
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL + "/query")
	if err != nil {
		t.Fatal(err)
	}
	after := int64(2)
	f := c.Events(EventFeedOptions{Target: Target{SessionKey: "agent:main:subagent:x"}, AfterSequence: &after,
		Transport: TransportSSE, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []string
	for range 6 {
		it, err := f.Next(ctx)
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		switch {
		case it.Event != nil:
			got = append(got, fmt.Sprint("event ", it.Event.Sequence))
		case it.Synced:
			got = append(got, fmt.Sprint("synced ", it.LastSequence, " ", it.Replayed))
		}
		if len(got) == 5 {
			break
		}
	}
	want := []string{"event 3", "event 4", "synced 4 2", "synced 4 0", "event 5"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("items %v, want %v", got, want)
	}
	_, err = f.Next(ctx)
	e, ok := errors.AsType[*Error](err)
	if !ok || e.Code != CodeHistoryGap || e.EarliestAvailable != 9 {
		t.Fatalf("after a pruned resume: %v, want HISTORY_GAP with earliest 9", err)
	}
	if _, again := f.Next(ctx); again != err {
		t.Fatalf("the next Next: %v, want the same refusal", again)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(lastIDs) != "[2 4 5]" {
		t.Fatalf("Last-Event-ID per request: %q, want 2, 4, 5", lastIDs)
	}
}
