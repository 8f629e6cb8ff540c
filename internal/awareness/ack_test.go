package awareness_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
)

// ackWorld is a service on the in-memory store with a clock the test moves.
type ackWorld struct {
	t     *testing.T
	ctx   context.Context
	svc   *awareness.Service
	store awareness.Store
	now   time.Time
}

func newAckWorld(t *testing.T) *ackWorld {
	t.Helper()
	st := newMemStore()
	w := &ackWorld{t: t, ctx: t.Context(), store: st, now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	w.svc = awareness.NewService(awareness.Config{Store: st, Now: func() time.Time { return w.now }})
	t.Cleanup(func() { w.svc.Hub().Close(); _ = st.Close() })
	return w
}

func (w *ackWorld) tick() { w.now = w.now.Add(time.Second) }

func (w *ackWorld) watch(watcher, target string, agent *string) {
	w.t.Helper()
	if res, err := w.svc.Watch(w.ctx, watcher, target, agent); err != nil || !res.Watched {
		w.t.Fatalf("Watch(%s, %s): %+v %v", watcher, target, res, err)
	}
}

func (w *ackWorld) human(key string, agent *string, watchers ...string) awareness.RecordResult {
	w.t.Helper()
	w.tick()
	actor := "+15550100"
	res, err := w.svc.RecordEvent(w.ctx, awareness.RecordInput{SessionKey: key, AgentID: agent, Kind: awareness.HumanDirectMessage,
		ActorType: awareness.ActorHuman, ActorID: &actor, Watchers: watchers})
	if err != nil {
		w.t.Fatalf("RecordEvent(%s): %v", key, err)
	}
	return res
}

func (w *ackWorld) subscribe(watcher string, includeClosed bool) <-chan awareness.Notice {
	w.t.Helper()
	ctx, cancel := context.WithCancel(w.ctx)
	w.t.Cleanup(cancel)
	out, _, err := w.svc.SubscribeNotices(ctx, &watcher, includeClosed)
	if err != nil {
		w.t.Fatal(err)
	}
	return out
}

// next reads one item; none fails when an item is there.
func next(t *testing.T, c <-chan awareness.Notice) awareness.Notice {
	t.Helper()
	select {
	case n := <-c:
		return n
	case <-time.After(5 * time.Second):
		t.Fatal("no notice within 5s")
		return awareness.Notice{}
	}
}

func none(t *testing.T, c <-chan awareness.Notice) {
	t.Helper()
	select {
	case n := <-c:
		t.Fatalf("unexpected item %+v", n)
	case <-time.After(50 * time.Millisecond):
	}
}

type item struct {
	Target string
	L, N   int64
	Closed bool
}

func itemOf(n awareness.Notice) item {
	return item{n.Target.AgentID + "/" + n.Target.Key, n.ChangesSince, n.NotifiedVersion, n.Closed}
}

func exact(target string, n int64) awareness.NoticeRef {
	return awareness.NoticeRef{Target: target, NotifiedVersion: n}
}

const (
	ackWatcher = "agent:main:main"
	ackTarget  = "agent:main:direct:alice"
	ackOther   = "agent:main:subagent:helper"
)

// NTC-3: the exact form acknowledges what the turn drained and nothing opened after the
// prompt was built; includeClosed subscribers get the closed item, then the follow-up;
// default subscribers see only the open notices, as before.
func TestAckNotices_ExactFormAndClosedItems_NTC3(t *testing.T) {
	w := newAckWorld(t)
	w.watch(ackWatcher, ackTarget, nil)
	w.watch(ackWatcher, ackOther, nil)
	plain, closing := w.subscribe(ackWatcher, false), w.subscribe(ackWatcher, true)
	w.human(ackTarget, nil) // N=1
	for _, c := range []<-chan awareness.Notice{plain, closing} {
		if got := itemOf(next(t, c)); got != (item{"main/" + ackTarget, 0, 1, false}) {
			t.Fatalf("first notice: %+v", got)
		}
	}
	drained, err := w.svc.PendingNotices(w.ctx, ackWatcher)
	if err != nil || len(drained) != 1 {
		t.Fatalf("drain: %v %v", drained, err)
	}
	// After the prompt was built: the target moves on, another target opens a notice.
	w.human(ackTarget, nil)
	w.human(ackOther, nil)
	for _, c := range []<-chan awareness.Notice{plain, closing} {
		if got := itemOf(next(t, c)); got != (item{"main/" + ackOther, 0, 1, false}) {
			t.Fatalf("other notice: %+v", got)
		}
	}
	w.tick()
	follow, err := w.svc.AckNotices(w.ctx, ackWatcher, nil, nil, []awareness.NoticeRef{exact(ackTarget, drained[0].NotifiedVersion)})
	if err != nil {
		t.Fatal(err)
	}
	if len(follow) != 1 || itemOf(follow[0]) != (item{"main/" + ackTarget, 1, 2, false}) {
		t.Fatalf("follow-ups: %+v", follow)
	}
	if got := itemOf(next(t, closing)); got != (item{"main/" + ackTarget, 0, 1, true}) {
		t.Errorf("includeClosed: first item after the ack %+v, want the closed notice", got)
	}
	for name, c := range map[string]<-chan awareness.Notice{"default": plain, "includeClosed": closing} {
		if got := itemOf(next(t, c)); got != (item{"main/" + ackTarget, 1, 2, false}) {
			t.Errorf("%s: got %+v, want the follow-up", name, got)
		}
	}
	// The notice opened after the drain is still pending, untouched.
	pending, _ := w.svc.PendingNotices(w.ctx, ackWatcher)
	var got []item
	for _, n := range pending {
		got = append(got, itemOf(n))
	}
	want := []item{{"main/" + ackOther, 0, 1, false}, {"main/" + ackTarget, 1, 2, false}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pending after the exact ack (-want +got):\n%s", diff)
	}
	// A retried ack of the same drain acknowledges nothing: the follow-up stays.
	if follow, err := w.svc.AckNotices(w.ctx, ackWatcher, nil, nil, []awareness.NoticeRef{exact(ackTarget, 1)}); err != nil || len(follow) != 0 {
		t.Errorf("retried ack: %+v %v", follow, err)
	}
	none(t, closing)
	// Unwatch removes a pending notice: closed, for includeClosed only.
	if ok, err := w.svc.Unwatch(w.ctx, ackWatcher, ackOther, nil); err != nil || !ok {
		t.Fatalf("Unwatch: %v %v", ok, err)
	}
	if got := itemOf(next(t, closing)); got != (item{"main/" + ackOther, 0, 1, true}) {
		t.Errorf("after unwatch: %+v, want the closed notice", got)
	}
	// The racy all-targets form closes whatever is pending, and says so.
	if _, err := w.svc.AckNotices(w.ctx, ackWatcher, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := itemOf(next(t, closing)); got != (item{"main/" + ackTarget, 1, 2, true}) {
		t.Errorf("after the all-targets ack: %+v", got)
	}
	none(t, plain)
	none(t, closing)
}

// NTC-7: a reset, a delete and cursor expiry close the notices of the cursors they
// remove, on includeClosed subscriptions only, after the commit.
func TestRemovalsPublishClosedNotices_NTC7_WAT5(t *testing.T) {
	w := newAckWorld(t)
	const sub = "agent:main:subagent:s"
	for _, wt := range []string{ackWatcher, sub} {
		w.watch(wt, ackTarget, nil)
		w.watch(wt, ackOther, nil)
	}
	plainMain, closedMain := w.subscribe(ackWatcher, false), w.subscribe(ackWatcher, true)
	closedSub := w.subscribe(sub, true)
	w.human(ackTarget, nil)
	w.human(ackOther, nil)
	for _, c := range []<-chan awareness.Notice{plainMain, closedMain, closedSub, closedSub, plainMain, closedMain} {
		next(t, c)
	}
	if ok, err := w.svc.ResetSession(w.ctx, sub, nil); err != nil || !ok {
		t.Fatalf("ResetSession: %v %v", ok, err)
	}
	var got []item
	got = append(got, itemOf(next(t, closedSub)), itemOf(next(t, closedSub)))
	if diff := cmp.Diff([]item{{"main/" + ackTarget, 0, 1, true}, {"main/" + ackOther, 0, 1, true}}, got); diff != "" {
		t.Errorf("reset (-want +got):\n%s", diff)
	}
	if ok, err := w.svc.DeleteSession(w.ctx, ackTarget, nil); err != nil || !ok {
		t.Fatalf("DeleteSession: %v %v", ok, err)
	}
	// The deletion (LIF-1) moved the pending notice's M and retired the cursor: its
	// acknowledgement opens the deletion's notice, whose acknowledgement removes it.
	w.svc.Flush()
	none(t, closedMain)
	if _, err := w.svc.AcknowledgeNotices(w.ctx, ackWatcher, []awareness.NoticeRef{exact(ackTarget, 1)}); err != nil {
		t.Fatal(err)
	}
	got = []item{itemOf(next(t, closedMain)), itemOf(next(t, closedMain)), itemOf(next(t, plainMain))}
	if diff := cmp.Diff([]item{{"main/" + ackTarget, 0, 1, true}, {"main/" + ackTarget, 1, 2, false}, {"main/" + ackTarget, 1, 2, false}}, got); diff != "" {
		t.Errorf("delete (-want +got):\n%s", diff)
	}
	if _, err := w.svc.AcknowledgeNotices(w.ctx, ackWatcher, []awareness.NoticeRef{exact(ackTarget, 2)}); err != nil {
		t.Fatal(err)
	}
	if got := itemOf(next(t, closedMain)); got != (item{"main/" + ackTarget, 1, 2, true}) {
		t.Errorf("the deletion's notice acknowledged: %+v", got)
	}
	if cs, err := w.svc.Watches(w.ctx, ptr(ackWatcher), ptr(ackTarget), nil); err != nil || len(cs) != 0 {
		t.Errorf("retired cursor after its acknowledgement: %v %v", cs, err)
	}
	w.now = w.now.Add(31 * 24 * time.Hour)
	p := awareness.NewPruner(awareness.PrunerConfig{Store: w.store, Publish: w.svc.PublishCommitted, Now: func() time.Time { return w.now },
		Policy: awareness.RetentionPolicy{CursorTTL: 30 * 24 * time.Hour}})
	if _, err := p.RunOnce(w.ctx); err != nil {
		t.Fatal(err)
	}
	if got := itemOf(next(t, closedMain)); got != (item{"main/" + ackOther, 0, 1, true}) {
		t.Errorf("expiry: %+v", got)
	}
	none(t, plainMain)
	none(t, closedMain)
	none(t, closedSub)
}

// NTC-3, ERR-2: a malformed acknowledgement is refused and acknowledges nothing.
func TestAckNotices_BadInput_NTC3(t *testing.T) {
	w := newAckWorld(t)
	w.watch(ackWatcher, ackTarget, nil)
	w.human(ackTarget, nil)
	main := "main"
	for name, call := range map[string]func() error{
		"notices with targets": func() error {
			_, err := w.svc.AckNotices(w.ctx, ackWatcher, []string{ackTarget}, nil, []awareness.NoticeRef{exact(ackTarget, 1)})
			return err
		},
		"notices with targetAgentId": func() error {
			_, err := w.svc.AckNotices(w.ctx, ackWatcher, nil, &main, []awareness.NoticeRef{exact(ackTarget, 1)})
			return err
		},
		"targetAgentId alone": func() error {
			_, err := w.svc.AckNotices(w.ctx, ackWatcher, nil, &main, nil)
			return err
		},
		"notifiedVersion 0": func() error {
			_, err := w.svc.AckNotices(w.ctx, ackWatcher, nil, nil, []awareness.NoticeRef{exact(ackTarget, 1), exact(ackOther, 0)})
			return err
		},
		"bad target in a valid list": func() error {
			_, err := w.svc.AckNotices(w.ctx, ackWatcher, nil, nil, []awareness.NoticeRef{exact(ackTarget, 1), exact("agent:", 1)})
			return err
		},
	} {
		if err := call(); awareness.ErrorCode(err) != awareness.EINVALID {
			t.Errorf("%s: err %v, want INVALID_ARGUMENT", name, err)
		}
	}
	if pending, _ := w.svc.PendingNotices(w.ctx, ackWatcher); len(pending) != 1 {
		t.Errorf("a refused ack acknowledged something: pending %v", pending)
	}
}
