package awareness_test

import (
	"context"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
)

func openReconcileService(t *testing.T, now func() time.Time) (*awareness.Service, awareness.Store) {
	t.Helper()
	st := newMemStore()
	t.Cleanup(func() { _ = st.Close() })
	return awareness.NewService(awareness.Config{Store: st, Now: now}), st
}

func recordN(t *testing.T, svc *awareness.Service, key string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := svc.RecordEvent(context.Background(), awareness.RecordInput{
			SessionKey: key, Kind: awareness.RunCompleted, ActorType: awareness.ActorSystem}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestREC2HistoryGapBoundaries: with pruned watermark W, changesSince W−1 has a gap,
// W and W+1 do not, and the head is always returned.
func TestREC2HistoryGapBoundaries(t *testing.T) {
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	svc, st := openReconcileService(t, func() time.Time { return now })
	const key = "agent:main:subagent:gap"
	recordN(t, svc, key, 10)
	// Keep the newest 4 rows in all: sequences 1..6 are pruned, W = 6.
	if _, err := st.Prune(context.Background(), awareness.RetentionPolicy{MaxRows: 4}, now); err != nil {
		t.Fatal(err)
	}
	const w = 6
	tests := []struct {
		since     int64
		wantGap   bool
		wantFirst int64
	}{
		{w - 1, true, w + 1},
		{w, false, w + 1},
		{w + 1, false, w + 2},
		{0, true, w + 1},
		{10, false, 0},
	}
	for _, tt := range tests {
		since := tt.since
		got, err := svc.SessionStatus(context.Background(), key, nil, &since, nil)
		if err != nil {
			t.Fatalf("changesSince %d: %v", since, err)
		}
		if got.StateVersion != 10 {
			t.Errorf("changesSince %d: stateVersion = %d, want 10", since, got.StateVersion)
		}
		if got.Changes.HistoryGap != tt.wantGap {
			t.Errorf("changesSince %d: historyGap = %v, want %v", since, got.Changes.HistoryGap, tt.wantGap)
		}
		var first int64
		if len(got.Changes.Events) > 0 {
			first = got.Changes.Events[0].Sequence
		}
		if first != tt.wantFirst {
			t.Errorf("changesSince %d: first event %d, want %d", since, first, tt.wantFirst)
		}
		if got.Changes.Earliest != w+1 || got.Changes.NextChangesSince != 10 {
			t.Errorf("changesSince %d: earliest %d next %d, want %d 10", since, got.Changes.Earliest, got.Changes.NextChangesSince, w+1)
		}
	}
	ahead := int64(11)
	if _, err := svc.SessionStatus(context.Background(), key, nil, &ahead, nil); awareness.ErrorCode(err) != awareness.ECURSORAHEAD {
		t.Errorf("changesSince 11 past head 10: err %v, want CURSOR_AHEAD (REC-3)", err)
	}
}

// TestREC1PagingReadsEveryEventOnce: 450 events read 200 at a time with
// nextChangesSince yield every event once, in order; truncated only on the first two
// pages.
func TestREC1PagingReadsEveryEventOnce(t *testing.T) {
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	svc, _ := openReconcileService(t, func() time.Time { return now })
	const key = "agent:main:subagent:pages"
	recordN(t, svc, key, 450)
	var since int64
	var seen []int64
	var truncated []bool
	for page := 0; page < 10; page++ {
		limit := 200
		st, err := svc.SessionStatus(context.Background(), key, nil, &since, &limit)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range st.Changes.Events {
			seen = append(seen, e.Sequence)
		}
		truncated = append(truncated, st.Changes.Truncated)
		since = st.Changes.NextChangesSince
		if !st.Changes.Truncated {
			break
		}
	}
	if len(seen) != 450 {
		t.Fatalf("read %d events, want 450", len(seen))
	}
	for i, s := range seen {
		if s != int64(i+1) {
			t.Fatalf("event %d has sequence %d, want %d (every event once, in order)", i, s, i+1)
		}
	}
	if want := []bool{true, true, false}; len(truncated) != 3 || truncated[0] != want[0] || truncated[1] != want[1] || truncated[2] != want[2] {
		t.Errorf("truncated per page = %v, want %v", truncated, want)
	}
}
