package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
)

func (f *fixture) holdStore() awareness.HoldStore {
	f.t.Helper()
	hs, ok := f.s.(awareness.HoldStore)
	if !ok {
		f.t.Fatalf("%T keeps no notice holds (awareness.HoldStore)", f.s)
	}
	return hs
}

func (f *fixture) updateHolds(q awareness.HoldQuery, fn func([]awareness.HoldView) ([]awareness.NoticeHold, error)) error {
	f.t.Helper()
	return f.holdStore().UpdateHolds(f.ctx, q, fn)
}

// testHolds: a watcher's holds read with its pending cursors (a pair without a row
// has the default maxRedeliver), written as fn returns them, read back exactly, found
// by due time; an error of fn writes nothing (RDL-1, RDL-2).
func testHolds(t *testing.T, f *fixture) {
	tgt := ref(t, targetKey)
	f.watch(parentKey, tgt, t0)
	f.append(t0, human(targetKey)) // opens (0, 1]
	var views []awareness.HoldView
	if err := f.updateHolds(awareness.HoldQuery{Watcher: parentKey}, func(vs []awareness.HoldView) ([]awareness.NoticeHold, error) {
		views = vs
		return nil, nil
	}); err != nil {
		t.Fatalf("UpdateHolds: %v", err)
	}
	if len(views) != 1 || views[0].Cursor == nil || views[0].Cursor.N != 1 ||
		views[0].Hold != (awareness.NoticeHold{Watcher: parentKey, Target: tgt, MaxRedeliver: awareness.DefaultMaxRedeliver}) {
		t.Fatalf("views of a pending pair without a hold: %+v", views)
	}
	h := awareness.NoticeHold{Watcher: parentKey, Target: tgt, MaxRedeliver: 2, N: 1, DrainedAt: t0.Add(time.Second),
		Turns: 1, Redeliveries: 1, Deliveries: 2, SnoozedUntil: t0.Add(time.Hour), Dismissed: 0, DueAt: t0.Add(time.Minute)}
	if err := f.updateHolds(awareness.HoldQuery{Watcher: parentKey}, func([]awareness.HoldView) ([]awareness.NoticeHold, error) {
		return []awareness.NoticeHold{h}, nil
	}); err != nil {
		t.Fatalf("UpdateHolds: %v", err)
	}
	got, err := f.holdStore().Holds(f.ctx, parentKey)
	if err != nil {
		t.Fatalf("Holds: %v", err)
	}
	if diff := cmp.Diff([]awareness.NoticeHold{h}, got); diff != "" {
		t.Errorf("Holds (-want +got):\n%s", diff)
	}
	// A refused update writes nothing.
	boom := errors.New("refused")
	if err := f.updateHolds(awareness.HoldQuery{Watcher: parentKey}, func([]awareness.HoldView) ([]awareness.NoticeHold, error) {
		return nil, boom
	}); !errors.Is(err, boom) && awareness.ErrorCode(err) == "" {
		t.Errorf("UpdateHolds with a refusing fn: %v", err)
	}
	if got2, _ := f.holdStore().Holds(f.ctx, parentKey); !cmp.Equal(got, got2) {
		t.Errorf("a refused update changed the holds: %+v", got2)
	}
	// Due: only rows with due_at <= DueBy, with their cursors.
	for _, tc := range []struct {
		by   time.Time
		want int
	}{{t0, 0}, {t0.Add(time.Minute), 1}, {t0.Add(time.Hour), 1}} {
		var n int
		if err := f.updateHolds(awareness.HoldQuery{DueBy: tc.by}, func(vs []awareness.HoldView) ([]awareness.NoticeHold, error) {
			n = len(vs)
			for _, v := range vs {
				if v.Cursor == nil || v.Cursor.N != 1 {
					t.Errorf("due view without its cursor: %+v", v)
				}
			}
			return nil, nil
		}); err != nil {
			t.Fatalf("UpdateHolds(due): %v", err)
		}
		if n != tc.want {
			t.Errorf("due by %v: %d holds, want %d", tc.by, n, tc.want)
		}
	}
	if other, err := f.holdStore().Holds(f.ctx, childKey); err != nil || len(other) != 0 {
		t.Errorf("Holds(other watcher) = %v, %v; want none", other, err)
	}
	// Holds reads only the holds of pending notices; the row of a pair without a
	// cursor goes with the cursor expiry.
	if ok, _, err := f.s.Unwatch(f.ctx, parentKey, tgt); err != nil || !ok {
		t.Fatalf("Unwatch: %v, %v", ok, err)
	}
	if got, _ := f.holdStore().Holds(f.ctx, parentKey); len(got) != 0 {
		t.Errorf("Holds after Unwatch: %+v, want none", got)
	}
	rows := func() int {
		n := 0
		if err := f.updateHolds(awareness.HoldQuery{Watcher: parentKey}, func(vs []awareness.HoldView) ([]awareness.NoticeHold, error) {
			n = len(vs)
			return nil, nil
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := rows(); n != 1 {
		t.Fatalf("hold rows before the expiry: %d, want 1", n)
	}
	f.prune(awareness.RetentionPolicy{CursorTTL: 24 * time.Hour}, t0.Add(time.Hour))
	if n := rows(); n != 0 {
		t.Errorf("hold rows of a pair without a cursor after the expiry: %d, want 0", n)
	}
}
