package storetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
)

// digestLog appends six events of several kinds and actors to targetKey and returns
// the target: 1 compacted (system), 2 human via telegram, 3 goal_changed (agent),
// 4 human via slack, 5 human without a channel, 6 run_completed (agent).
func digestLog(f *fixture, now time.Time) awareness.SessionRef {
	f.t.Helper()
	noChannel := human(targetKey)
	noChannel.Channel = nil
	slack := human(targetKey)
	slack.Channel = ptr("slack")
	f.append(now,
		system(targetKey, awareness.Compacted),
		human(targetKey),
		byAgent(targetKey, awareness.GoalChanged, childKey),
		slack,
		noChannel,
		byAgent(targetKey, awareness.RunCompleted, childKey),
	)
	return ref(f.t, targetKey)
}

func (f *fixture) digests(rs ...awareness.DigestRange) []awareness.NoticeDigest {
	f.t.Helper()
	ds, err := f.s.Digests(f.ctx, rs)
	if err != nil {
		f.t.Fatalf("Digests(%v): %v", rs, err)
	}
	if len(ds) != len(rs) {
		f.t.Fatalf("Digests: %d digests for %d ranges", len(ds), len(rs))
	}
	return ds
}

// testDigest: a digest counts the events of (L, N] by kind (schema order) and actor
// type (schema order), the human events and the latest human event's channel, and
// names N (DIG-1).
func testDigest(t *testing.T, f *fixture) {
	tgt := digestLog(f, t0)
	ds := f.digests(
		awareness.DigestRange{Target: tgt, After: 0, Through: 6},
		awareness.DigestRange{Target: tgt, After: 0, Through: 4},
		awareness.DigestRange{Target: tgt, After: 2, Through: 3},
		awareness.DigestRange{Target: tgt, After: 5, Through: 9}, // beyond the head: what exists
	)
	want := []awareness.NoticeDigest{{
		ByKind: []awareness.KindCount{{Kind: awareness.HumanDirectMessage, Count: 3}, {Kind: awareness.GoalChanged, Count: 1},
			{Kind: awareness.RunCompleted, Count: 1}, {Kind: awareness.Compacted, Count: 1}},
		ByActorType: []awareness.ActorTypeCount{{ActorType: awareness.ActorHuman, Count: 3},
			{ActorType: awareness.ActorAgent, Count: 2}, {ActorType: awareness.ActorSystem, Count: 1}},
		HumanEvents: 3, LastHumanChannel: "", LatestVersion: 6, Counted: 6,
	}, {
		ByKind: []awareness.KindCount{{Kind: awareness.HumanDirectMessage, Count: 2}, {Kind: awareness.GoalChanged, Count: 1},
			{Kind: awareness.Compacted, Count: 1}},
		ByActorType: []awareness.ActorTypeCount{{ActorType: awareness.ActorHuman, Count: 2},
			{ActorType: awareness.ActorAgent, Count: 1}, {ActorType: awareness.ActorSystem, Count: 1}},
		HumanEvents: 2, LastHumanChannel: "slack", LatestVersion: 4, Counted: 4,
	}, {
		ByKind:        []awareness.KindCount{{Kind: awareness.GoalChanged, Count: 1}},
		ByActorType:   []awareness.ActorTypeCount{{ActorType: awareness.ActorAgent, Count: 1}},
		LatestVersion: 3, Counted: 1,
	}, {
		ByKind:        []awareness.KindCount{{Kind: awareness.RunCompleted, Count: 1}},
		ByActorType:   []awareness.ActorTypeCount{{ActorType: awareness.ActorAgent, Count: 1}},
		LatestVersion: 9, Counted: 1, Pruned: 3,
	}}
	if diff := cmp.Diff(want, ds); diff != "" {
		t.Errorf("Digests (-want +got):\n%s", diff)
	}
	// The digest of a pending notice is that of its (L, N], and stays the same, byte
	// for byte, while the log grows past N.
	f.watch(parentKey, tgt, t0)
	f.append(t0.Add(time.Second), human(targetKey)) // 7 opens (6, 7]
	f.append(t0.Add(2*time.Second), system(targetKey, awareness.Compacted), human(targetKey))
	ns := f.pending(parentKey)
	if len(ns) != 1 || ns[0].ChangesSince != 6 || ns[0].NotifiedVersion != 7 {
		t.Fatalf("pending: got %+v, want one notice (6, 7]", ns)
	}
	first := f.digests(awareness.RangeOf(ns[0]))[0]
	wantN := awareness.NoticeDigest{
		ByKind:           []awareness.KindCount{{Kind: awareness.HumanDirectMessage, Count: 1}},
		ByActorType:      []awareness.ActorTypeCount{{ActorType: awareness.ActorHuman, Count: 1}},
		HumanEvents:      1,
		LastHumanChannel: "telegram",
		LatestVersion:    7,
		Counted:          1,
	}
	if diff := cmp.Diff(wantN, first); diff != "" {
		t.Errorf("digest of the pending notice (-want +got):\n%s", diff)
	}
	f.append(t0.Add(3*time.Second), byAgent(targetKey, awareness.GoalChanged, childKey))
	if diff := cmp.Diff(first, f.digests(awareness.RangeOf(ns[0]))[0]); diff != "" {
		t.Errorf("digest changed when the log grew past N (-first +again):\n%s", diff)
	}
	// Nothing in the range: empty lists, not nil.
	empty := f.digests(awareness.DigestRange{Target: ref(t, opsKey), After: 0, Through: 2})[0]
	if empty.ByKind == nil || empty.ByActorType == nil || len(empty.ByKind)+len(empty.ByActorType) != 0 ||
		empty.Counted != 0 || empty.Pruned != 2 || empty.LatestVersion != 2 {
		t.Errorf("digest of an empty range: got %+v", empty)
	}
	if ds := f.digests(); len(ds) != 0 {
		t.Errorf("Digests(): got %v, want none", ds)
	}
}

// testDigestPruned: events of (L, N] that retention pruned are not counted; the
// digest says how many are gone (Pruned), and Counted + Pruned = N − L (DIG-1, SIG-6).
func testDigestPruned(t *testing.T, f *fixture) {
	tgt := digestLog(f, t0)
	r := awareness.DigestRange{Target: tgt, After: 0, Through: 6}
	before := f.digests(r)[0]
	f.prune(awareness.RetentionPolicy{MaxRows: 2}, t0.Add(time.Minute)) // keeps 5 and 6
	got := f.digests(r)[0]
	want := awareness.NoticeDigest{
		ByKind:      []awareness.KindCount{{Kind: awareness.HumanDirectMessage, Count: 1}, {Kind: awareness.RunCompleted, Count: 1}},
		ByActorType: []awareness.ActorTypeCount{{ActorType: awareness.ActorHuman, Count: 1}, {ActorType: awareness.ActorAgent, Count: 1}},
		HumanEvents: 1, LatestVersion: 6, Counted: 2, Pruned: 4,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("digest after pruning (-want +got):\n%s", diff)
	}
	if before.Counted+int(before.Pruned) != 6 || got.Counted+int(got.Pruned) != 6 {
		t.Errorf("Counted + Pruned: before %d+%d, after %d+%d, want 6", before.Counted, before.Pruned, got.Counted, got.Pruned)
	}
}

// testDigestBadRange: a range no notice covers is INVALID_ARGUMENT (ERR-1).
func testDigestBadRange(t *testing.T, f *fixture) {
	tgt := digestLog(f, t0)
	for _, r := range []awareness.DigestRange{
		{Target: tgt, After: 3, Through: 3},
		{Target: tgt, After: 4, Through: 2},
		{Target: tgt, After: -1, Through: 2},
		{Target: awareness.SessionRef{Key: targetKey}, After: 0, Through: 2},
	} {
		_, err := f.s.Digests(f.ctx, []awareness.DigestRange{{Target: tgt, After: 0, Through: 1}, r})
		if code := awareness.ErrorCode(err); code != awareness.EINVALID {
			t.Errorf("Digests(%+v): got %v (%s), want %s", r, err, code, awareness.EINVALID)
		}
	}
}
