// The model's check after every step: the store's cursors and pending notices, and the
// digests, compared with the model's.

package modeltest

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/awareness/awareness/internal/awareness"
)

type cursorView struct {
	Watcher, Target string
	L, N, M         int64
	TG, WG          int64
	Retired         bool
}

type noticeView struct {
	Watcher, Target string
	L, N, M         int64
	Text            string
	Wake            bool
	TG, WG          int64
}

func (mc *machine) check(rt *rapid.T) {
	got, err := mc.store.Cursors(ctx(), awareness.CursorQuery{})
	if err != nil {
		rt.Fatalf("cursors: %v", err)
	}
	var gotC, wantC []cursorView
	for _, c := range got {
		if !(0 <= c.L && c.L <= c.N && c.N <= c.M) {
			rt.Fatalf("WAT-1: invariant L ≤ N ≤ M broken: %+v", c)
		}
		gotC = append(gotC, cursorView{c.Watcher, c.Target.Key, c.L, c.N, c.M, c.TargetGeneration, c.WatcherGeneration, c.Retired})
	}
	var wantN []noticeView
	pendingPairs := map[pair]int{}
	for p, c := range mc.m.cursors {
		wantC = append(wantC, cursorView{p.w, p.t, c.L, c.N, c.M, c.tg, c.wg, c.retired})
		if c.N > c.L {
			wantN = append(wantN, noticeView{p.w, p.t, c.L, c.N, c.M,
				noticeText(p.t, c.L),
				!isSubagent(p.w), c.tg, c.wg})
		}
	}
	sortViews(gotC)
	sortViews(wantC)
	if d := cmp.Diff(wantC, gotC); d != "" {
		rt.Fatalf("cursors differ from the model (-want +got):\n%s", d)
	}
	pend, err := mc.store.Pending(ctx(), "")
	if err != nil {
		rt.Fatalf("pending: %v", err)
	}
	var gotN []noticeView
	for _, n := range pend {
		gotN = append(gotN, noticeView{n.Watcher, n.Target.Key, n.ChangesSince, n.NotifiedVersion, n.MaterialVersion, n.Text, n.Wake,
			n.TargetGeneration, n.WatcherGeneration})
		p := pair{n.Watcher, n.Target.Key}
		if pendingPairs[p]++; pendingPairs[p] > 1 {
			rt.Fatalf("NTC-2, LIF-2: two notices pending for %s on %s", p.w, p.t)
		}
	}
	sortNotices(gotN)
	sortNotices(wantN)
	if d := cmp.Diff(wantN, gotN); d != "" {
		rt.Fatalf("pending notices differ from the model (-want +got):\n%s", d)
	}
	logs := map[awareness.SessionRef][]awareness.Event{}
	for _, k := range targets {
		st, err := mc.svc.SessionStatus(ctx(), k, nil, ptr(int64(0)), nil)
		if err != nil {
			rt.Fatalf("status %s: %v", k, err)
		}
		if st.StateVersion != mc.m.heads[k] {
			rt.Fatalf("SIG-3: %s stateVersion %d, model %d", k, st.StateVersion, mc.m.heads[k])
		}
		if st.Generation != mc.m.genOf(k) {
			rt.Fatalf("LIF-2: %s generation %d, model %d", k, st.Generation, mc.m.genOf(k))
		}
		if want := mc.m.pruned[k] > 0; st.Changes.HistoryGap != want {
			rt.Fatalf("REC-2: %s historyGap %v, model pruned through %d", k, st.Changes.HistoryGap, mc.m.pruned[k])
		}
		var wantSeqs, gotSeqs []int64
		for _, e := range mc.m.events {
			if e.session == k {
				wantSeqs = append(wantSeqs, e.seq)
			}
		}
		for _, e := range st.Changes.Events {
			gotSeqs = append(gotSeqs, e.Sequence)
		}
		if d := cmp.Diff(wantSeqs, gotSeqs); d != "" {
			rt.Fatalf("retained events of %s differ (-want +got):\n%s", k, d)
		}
		logs[st.Ref] = st.Changes.Events
	}
	mc.checkDigests(rt, pend, logs)
	mc.checkVisible(rt)
}

// digest checks the digest of a drawn range (L, N] of a drawn session's log against
// the log, counted here (DIG-1), whether or not a notice covers it.
func (mc *machine) digest(rt *rapid.T) {
	k := rapid.SampledFrom(targets).Draw(rt, "session")
	head := mc.m.heads[k]
	after := rapid.Int64Range(0, head).Draw(rt, "after")
	through := rapid.Int64Range(after+1, head+2).Draw(rt, "through")
	st, err := mc.svc.SessionStatus(ctx(), k, nil, ptr(int64(0)), nil)
	if err != nil {
		rt.Fatalf("status %s: %v", k, err)
	}
	n := awareness.Notice{Watcher: "agent:main:main", Target: st.Ref, ChangesSince: after, NotifiedVersion: through}
	mc.checkDigests(rt, []awareness.Notice{n}, map[awareness.SessionRef][]awareness.Event{st.Ref: st.Changes.Events})
}

// hidden reports whether the model hides the pending notice of p (N n) now: it is
// snoozed until later (RDL-2).
func (mc *machine) hidden(p pair, n int64) bool {
	sn, ok := mc.m.snoozed[p]
	return ok && sn.n == n && mc.now.Before(sn.until)
}

// snooze snoozes a drawn pending notice for a drawn time (RDL-2).
func (mc *machine) snooze(rt *rapid.T) {
	var ps []pair
	for p, c := range mc.m.cursors {
		if c.N > c.L {
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 {
		rt.Skip("nothing pending")
	}
	slices.SortFunc(ps, func(a, b pair) int { return strings.Compare(a.w+"\x00"+a.t, b.w+"\x00"+b.t) })
	p := rapid.SampledFrom(ps).Draw(rt, "pair")
	c := mc.m.cursors[p]
	until := mc.now.Add(time.Duration(rapid.IntRange(1, 180).Draw(rt, "minutes")) * time.Minute)
	if _, err := mc.svc.SnoozeNotice(ctx(), p.w, awareness.NoticeRef{Target: p.t, NotifiedVersion: c.N}, until); err != nil {
		rt.Fatalf("RDL-2: snooze %s→%s N=%d: %v", p.w, p.t, c.N, err)
	}
	mc.m.snoozed[p] = snooze{n: c.N, until: until}
}

// drainService drains a watcher on the service (RDL-1): it hands out only pending
// notices that are not snoozed, never one an acknowledgement closed.
func (mc *machine) drainService(rt *rapid.T) {
	w := rapid.SampledFrom(qualified).Draw(rt, "watcher")
	ns, err := mc.svc.DrainNotices(ctx(), w)
	if err != nil {
		rt.Fatalf("drainNotices %s: %v", w, err)
	}
	for _, n := range ns {
		p := pair{w, n.Target.Key}
		c := mc.m.cursors[p]
		if c == nil || c.N <= c.L || c.N != n.NotifiedVersion || mc.hidden(p, c.N) || mc.m.closed[p][n.ChangesSince] {
			rt.Fatalf("RDL-1: drainNotices handed out %s→%s (%d, %d], which the model does not have pending and visible",
				w, n.Target.Key, n.ChangesSince, n.NotifiedVersion)
		}
	}
}

// wake moves the clock and wakes the due holds (RDL-1, RDL-2).
func (mc *machine) wake(rt *rapid.T) {
	mc.tick(time.Duration(rapid.IntRange(0, 240).Draw(rt, "minutes")) * time.Minute)
	if _, err := mc.svc.WakeHolds(ctx()); err != nil {
		rt.Fatalf("wake holds: %v", err)
	}
}

// checkVisible checks every watcher's pendingNotices against the model: its pending
// notices but the snoozed ones (RDL-2, NTC-7).
func (mc *machine) checkVisible(rt *rapid.T) {
	for _, w := range qualified {
		ns, err := mc.svc.PendingNotices(ctx(), w)
		if err != nil {
			rt.Fatalf("pendingNotices %s: %v", w, err)
		}
		var got, want []string
		for _, n := range ns {
			got = append(got, fmt.Sprintf("%s %d", n.Target.Key, n.NotifiedVersion))
		}
		for p, c := range mc.m.cursors {
			if p.w == w && c.N > c.L && !mc.hidden(p, c.N) {
				want = append(want, fmt.Sprintf("%s %d", p.t, c.N))
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if d := cmp.Diff(want, got); d != "" {
			rt.Fatalf("RDL-2: pendingNotices of %s differ from the model's visible notices (-want +got):\n%s", w, d)
		}
	}
}

// checkDigests checks every pending notice's digest against its range of the
// retained log, counted here (DIG-1): counts by kind and actor type, the human
// events, the latest human event's channel, N, and what pruning removed.
func (mc *machine) checkDigests(rt *rapid.T, pend []awareness.Notice, logs map[awareness.SessionRef][]awareness.Event) {
	if len(pend) == 0 {
		return
	}
	rs := make([]awareness.DigestRange, len(pend))
	for i, n := range pend {
		rs[i] = awareness.RangeOf(n)
	}
	ds, err := mc.store.Digests(ctx(), rs)
	if err != nil {
		rt.Fatalf("DIG-1: digests: %v", err)
	}
	for i, n := range pend {
		d := ds[i]
		kinds, actors := map[awareness.EventKind]int{}, map[awareness.ActorType]int{}
		humans, channel, counted := 0, "", 0
		for _, e := range logs[n.Target] {
			if e.Sequence <= n.ChangesSince || e.Sequence > n.NotifiedVersion {
				continue
			}
			counted++
			kinds[e.Kind]++
			actors[e.ActorType]++
			if e.ActorType == awareness.ActorHuman {
				humans++
				channel = e.Payload.Channel
			}
		}
		gotKinds, gotActors := map[awareness.EventKind]int{}, map[awareness.ActorType]int{}
		for _, c := range d.ByKind {
			gotKinds[c.Kind] += c.Count
		}
		for _, c := range d.ByActorType {
			gotActors[c.ActorType] += c.Count
		}
		if !cmp.Equal(kinds, gotKinds) || !cmp.Equal(actors, gotActors) || d.HumanEvents != humans ||
			d.LastHumanChannel != channel || d.LatestVersion != n.NotifiedVersion || d.Counted != counted ||
			d.Pruned != n.NotifiedVersion-n.ChangesSince-int64(counted) {
			rt.Fatalf("DIG-1: digest of %s→%s (%d, %d] is %+v; the log counts kinds %v, actors %v, %d human (channel %q), %d counted",
				n.Watcher, n.Target.Key, n.ChangesSince, n.NotifiedVersion, d, kinds, actors, humans, channel, counted)
		}
	}
}

// noticeText is NTC-1 written from the specification: a bare target (KEY-3, under
// agent main in this model) also names its agent.
func noticeText(t string, l int64) string {
	if _, ok := awareness.ParseSessionKey(t); !ok {
		return fmt.Sprintf(`Session "%s" changed (other actor). Reconcile before acting: session_status sessionKey "%s" agentId "main" changesSince %d.`, t, t, l)
	}
	return fmt.Sprintf(`Session "%s" changed (other actor). Reconcile before acting: session_status sessionKey "%s" changesSince %d.`, t, t, l)
}

func isSubagent(k string) bool {
	p, _ := awareness.ParseSessionKey(k)
	return p.IsSubagent()
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func ptr[T any](v T) *T { return &v }

func sortViews(v []cursorView) {
	sort.Slice(v, func(i, j int) bool {
		if v[i].Watcher != v[j].Watcher {
			return v[i].Watcher < v[j].Watcher
		}
		return v[i].Target < v[j].Target
	})
}

func sortNotices(v []noticeView) {
	sort.Slice(v, func(i, j int) bool {
		if v[i].Watcher != v[j].Watcher {
			return v[i].Watcher < v[j].Watcher
		}
		return v[i].Target < v[j].Target
	})
}
