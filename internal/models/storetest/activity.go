package storetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
)

// RunActivity runs the conformance suite of Store.Activity (the dashboard's events
// per minute by kind). open has the contract of Run.
func RunActivity(t *testing.T, open func(t *testing.T) awareness.Store) {
	t.Run("Activity_buckets_by_minute_kind_and_scope", func(t *testing.T) {
		t.Parallel()
		testActivity(t, &fixture{t: t, s: open(t), ctx: t.Context()})
	})
}

func testActivity(t *testing.T, f *fixture) {
	m0 := t0.Truncate(time.Minute) // 12:00
	at := func(d time.Duration) time.Time { return m0.Add(d) }
	child := ref(t, childKey)
	target := ref(t, targetKey)
	ops := ref(t, opsKey)
	f.append(at(5*time.Second), human(childKey), human(childKey), system(childKey, awareness.RunCompleted))
	f.append(at(59*time.Second+999*time.Millisecond), human(targetKey))
	f.append(at(time.Minute), human(childKey))                       // 12:01, the next bucket
	f.append(at(3*time.Minute), system(opsKey, awareness.Compacted)) // another agent
	f.append(at(10*time.Minute), human(childKey))                    // outside the window below

	q := func(q awareness.ActivityQuery) []awareness.ActivityBucket {
		t.Helper()
		q.Since, q.Until = at(0), at(10*time.Minute)
		got, err := f.s.Activity(f.ctx, q)
		if err != nil {
			t.Fatalf("Activity(%+v): %v", q, err)
		}
		return got
	}
	b := func(min int, kind awareness.EventKind, n int64) awareness.ActivityBucket {
		return awareness.ActivityBucket{Minute: at(time.Duration(min) * time.Minute), Kind: kind, Count: n}
	}
	want := []awareness.ActivityBucket{
		b(0, awareness.HumanDirectMessage, 3), b(0, awareness.RunCompleted, 1),
		b(1, awareness.HumanDirectMessage, 1),
		b(3, awareness.Compacted, 1),
	}
	if diff := cmp.Diff(want, q(awareness.ActivityQuery{})); diff != "" {
		t.Errorf("every session (-want +got):\n%s", diff)
	}
	want = []awareness.ActivityBucket{
		b(0, awareness.HumanDirectMessage, 2), b(0, awareness.RunCompleted, 1),
		b(1, awareness.HumanDirectMessage, 1),
	}
	if diff := cmp.Diff(want, q(awareness.ActivityQuery{Session: &child})); diff != "" {
		t.Errorf("one session (-want +got):\n%s", diff)
	}
	want = []awareness.ActivityBucket{b(0, awareness.HumanDirectMessage, 1)}
	if diff := cmp.Diff(want, q(awareness.ActivityQuery{Session: &target})); diff != "" {
		t.Errorf("target session (-want +got):\n%s", diff)
	}
	want = []awareness.ActivityBucket{b(3, awareness.Compacted, 1)}
	if diff := cmp.Diff(want, q(awareness.ActivityQuery{AgentID: ops.AgentID})); diff != "" {
		t.Errorf("agent ops (-want +got):\n%s", diff)
	}
	if got := q(awareness.ActivityQuery{Session: &awareness.SessionRef{AgentID: "main", Key: "agent:main:nobody"}}); len(got) != 0 {
		t.Errorf("unknown session: %v, want no bucket", got)
	}
}
