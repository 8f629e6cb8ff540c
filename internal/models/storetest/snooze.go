package storetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
)

// holdsState is what a rejected call must leave unchanged: the watcher's holds and
// pending notices.
func holdsState(t *testing.T, f *fixture, svc *awareness.Service, watcher string) ([]awareness.NoticeHold, []awareness.Cursor) {
	t.Helper()
	hs, err := f.holdStore().Holds(f.ctx, watcher)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := f.s.Cursors(f.ctx, awareness.CursorQuery{Watcher: watcher})
	if err != nil {
		t.Fatal(err)
	}
	return hs, cs
}

// testSnooze: snoozeNotice hides a pending notice from pendingNotices, drains and a
// new subscription until its time, then the hold poll delivers it again to the
// watcher's live subscription (a new delivery); bad inputs are refused with a code and
// write nothing (RDL-2, ERR-1).
func testSnooze(t *testing.T, f *fixture) {
	svc, clk := f.service(awareness.HoldPolicy{RedeliverTurns: 3, RedeliverAfter: 10 * time.Minute, MaxSnooze: 24 * time.Hour})
	ctx := f.ctx
	const w = parentKey
	if _, err := svc.Watch(ctx, w, targetKey, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.RecordEvent(ctx, human(targetKey)); err != nil {
		t.Fatal(err)
	}
	ns, err := svc.PendingNotices(ctx, w)
	if err != nil || len(ns) != 1 {
		t.Fatalf("pending: %v, %v", ns, err)
	}
	n := ns[0]

	// Bad inputs: nothing written.
	hs0, cs0 := holdsState(t, f, svc, w)
	bad := refOf(n)
	bad.NotifiedVersion = 7
	neg := -1
	for name, tc := range map[string]struct {
		call func() error
		code string
	}{
		"until in the past": {func() error { _, err := svc.SnoozeNotice(ctx, w, refOf(n), clk.Now().Add(-time.Second)); return err }, awareness.EINVALID},
		"until now":         {func() error { _, err := svc.SnoozeNotice(ctx, w, refOf(n), clk.Now()); return err }, awareness.EINVALID},
		"until too far":     {func() error { _, err := svc.SnoozeNotice(ctx, w, refOf(n), clk.Now().Add(25*time.Hour)); return err }, awareness.EINVALID},
		"unknown notice":    {func() error { _, err := svc.SnoozeNotice(ctx, w, bad, clk.Now().Add(time.Hour)); return err }, awareness.ENOTFOUND},
		"dismiss unknown":   {func() error { _, err := svc.DismissNotice(ctx, w, bad); return err }, awareness.ENOTFOUND},
		"release bad ref": {func() error {
			_, err := svc.ReleaseNotices(ctx, w, []awareness.NoticeRef{{Target: targetKey, NotifiedVersion: 0}})
			return err
		}, awareness.EINVALID},
		"negative maxRedeliver": {func() error {
			_, err := svc.WatchWith(ctx, w, targetKey, nil, awareness.WatchOptions{MaxRedeliver: &neg})
			return err
		}, awareness.EINVALID},
	} {
		if code := awareness.ErrorCode(tc.call()); code != tc.code {
			t.Errorf("%s: code %q, want %q", name, code, tc.code)
		}
	}
	hs1, cs1 := holdsState(t, f, svc, w)
	if !cmp.Equal(hs0, hs1) || !cmp.Equal(cs0, cs1) {
		t.Errorf("a refused call wrote: holds %+v → %+v, cursors %+v → %+v", hs0, hs1, cs0, cs1)
	}

	// A live subscription of the watcher gets the notice, then again when it wakes.
	live, stop, err := svc.SubscribeNotices(ctx, ptr(w), false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stop() }()
	if got := <-live; got.NotifiedVersion != n.NotifiedVersion || got.Delivery != 0 {
		t.Fatalf("backlog: got %+v", got)
	}
	until := clk.Now().Add(30 * time.Minute)
	sn, err := svc.SnoozeNotice(ctx, w, refOf(n), until)
	if err != nil {
		t.Fatalf("snooze: %v", err)
	}
	if sn.NotifiedVersion != n.NotifiedVersion || sn.Text != n.Text {
		t.Errorf("snoozed notice: got %+v, want %+v", sn, n)
	}
	if ns, _ := svc.PendingNotices(ctx, w); len(ns) != 0 {
		t.Errorf("a snoozed notice is listed: %+v", ns)
	}
	if ns, _ := svc.DrainNotices(ctx, w); len(ns) != 0 {
		t.Errorf("a snoozed notice is drained: %+v", ns)
	}
	if woke, _ := svc.WakeHolds(ctx); woke != 0 {
		t.Errorf("woke %d before until", woke)
	}
	clk.add(30 * time.Minute)
	if woke, err := svc.WakeHolds(ctx); err != nil || woke != 1 {
		t.Fatalf("WakeHolds at until: %d, %v; want 1", woke, err)
	}
	svc.Flush()
	select {
	case got := <-live:
		if got.NotifiedVersion != n.NotifiedVersion || got.Delivery != 1 || got.Text != n.Text {
			t.Errorf("woken notice: got %+v", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the woken notice was not delivered to the live subscription")
	}
	if ns, _ := svc.PendingNotices(ctx, w); len(ns) != 1 || ns[0].Delivery != 1 {
		t.Errorf("after the snooze: pending %+v", ns)
	}

	// dismissNotice acknowledges without reconciling and says so; the hold records it.
	ack, err := svc.DismissNotice(ctx, w, refOf(n))
	if err != nil {
		t.Fatalf("dismiss: %v", err)
	}
	if ack.Outcome != awareness.AckAcknowledged || !ack.Dismissed || ack.NotifiedVersion != n.NotifiedVersion {
		t.Errorf("dismiss answer: %+v", ack)
	}
	if c := f.mustCursor(w, n.Target); c.L != n.NotifiedVersion || c.Pending() {
		t.Errorf("after dismiss: cursor %+v", c)
	}
	var dismissed []int64
	if err := f.updateHolds(awareness.HoldQuery{Watcher: w}, func(vs []awareness.HoldView) ([]awareness.NoticeHold, error) {
		for _, v := range vs {
			dismissed = append(dismissed, v.Hold.Dismissed)
		}
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(dismissed) != 1 || dismissed[0] != n.NotifiedVersion {
		t.Errorf("the dismissal is not recorded: %v, want [%d]", dismissed, n.NotifiedVersion)
	}
	if _, err := svc.DismissNotice(ctx, w, refOf(n)); awareness.ErrorCode(err) != awareness.ENOTFOUND {
		t.Errorf("dismissing it again: %v, want %s", err, awareness.ENOTFOUND)
	}
}
