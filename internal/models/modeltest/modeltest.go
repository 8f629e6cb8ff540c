// Package modeltest is a model-based property test of the watcher and notice protocol
// of SPEC §3–4: random sequences of record, watch, unwatch, ack, drain and exact ack,
// reset, delete, prune, restart, including a restart between a drain and its exact
// ack, and, where the database is shared, another process's start, run against a real
// store through awareness.Service. After every step the store's cursors and pending
// notices are compared with a small reference model written from the specification,
// not from the implementation's state machine. Each exact acknowledgement's answer
// per notice is compared with the model's, and no notice is handed out twice: a drain
// never returns a notice, by pair and changesSince, that an acknowledgement closed,
// whatever restarts came in between (NTC-3, NTC-5).
//
// The lifecycle kinds are part of it (LIF-1, LIF-2): a reset, recorded or by
// resetSession, starts a new generation of its session, drops the cursors it holds and
// closes the notices on it; a deletion, recorded or by deleteSession, notifies every
// watcher once and retires their cursors, which go once nothing is pending. At most one
// notice is pending per pair, every notice carries the generations of its pair, and an
// exact acknowledgement drained by an earlier generation of its watcher is refused
// with STALE_GENERATION and acknowledges nothing.
package modeltest

import (
	"context"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/awareness/awareness/internal/awareness"
)

// Database opens stores on one database. Each call opens a new store on the same
// database, as a restart does; the test closes each store it opens.
type Database func() (awareness.Store, error)

// NewDatabase returns a fresh, empty database for one property-test run.
type NewDatabase func(t *testing.T) Database

// Options tunes Run for a backend.
type Options struct {
	// OtherProcess adds the step of another process starting on a shared database,
	// as PostgreSQL allows: its store opened beside the running one, its startup
	// sweep, closed again.
	OtherProcess bool
}

// Run runs the model test. rapid's -rapid.checks and -rapid.steps bound the runs
// and steps.
func Run(t *testing.T, newDB NewDatabase, opts ...Options) {
	var o Options
	for _, x := range opts {
		o.OtherProcess = o.OtherProcess || x.OtherProcess
	}
	rapid.Check(t, func(rt *rapid.T) {
		m := newMachine(t, rt, newDB(t))
		defer m.close()
		steps := map[string]func(*rapid.T){
			"record":          m.record,
			"watch":           m.watch,
			"unwatch":         m.unwatch,
			"ack":             m.ack,
			"drain":           m.drain,
			"ackExact":        m.ackExact,
			"drainRestartAck": m.drainRestartAck,
			"reset":           m.reset,
			"delete":          m.delete,
			"prune":           m.prune,
			"restart":         m.restart,
			"digest":          m.digest,
			"snooze":          m.snooze,
			"drainService":    m.drainService,
			"wake":            m.wake,
			"":                m.check,
		}
		if o.OtherProcess {
			steps["otherStart"] = m.otherStart
		}
		rt.Repeat(steps)
	})
}

// The universe of sessions: agent-qualified keys, which can watch, and a bare key.
var (
	qualified = []string{"agent:main:main", "agent:main:subagent:a", "agent:main:subagent:b", "agent:ops:main"}
	targets   = append(append([]string{}, qualified...), "global")
	kinds     = awareness.AllEventKinds
)

type pair struct{ w, t string } // watcher key, target key (bare keys are under agent main)

type cur struct {
	L, N, M int64
	updated time.Time
	// tg and wg are the generations of the target and of the watcher (LIF-2);
	// retired marks the cursor of a deleted target (LIF-1).
	tg, wg  int64
	retired bool
}

type event struct {
	session  string
	seq      int64
	occurred time.Time
	dedupe   string // "" or session+"\x00"+key
}

type model struct {
	heads   map[string]int64
	pruned  map[string]int64
	events  []event // retained, in append order
	dedupe  map[string]bool
	cursors map[pair]*cur
	// closed holds, per pair, the changesSince L of every notice an acknowledgement
	// closed during the cursor's life: a drain must never hand one out again. A new
	// cursor of the pair after unwatch, reset, delete or expiry starts afresh.
	closed map[pair]map[int64]bool
	// snoozed holds, per pair, the N of the notice snoozed and until when (RDL-2): it
	// is hidden while the pair's pending notice is that one and until is ahead.
	snoozed map[pair]snooze
	// gen is each session's generation, 1 when absent (LIF-2); deleted holds the
	// sessions whose head is marked deleted (LIF-1).
	gen     map[string]int64
	deleted map[string]bool
}

type snooze struct {
	n     int64
	until time.Time
}

// genOf is a session's generation (LIF-2).
func (m *model) genOf(k string) int64 {
	if g := m.gen[k]; g > 0 {
		return g
	}
	return 1
}

// newCur is a new cursor of pair p in the model, born at the pair's generations.
func (m *model) newCur(p pair, c cur) *cur {
	c.tg, c.wg = m.genOf(p.t), m.genOf(p.w)
	m.cursors[p] = &c
	return &c
}

// dropRetired drops the watcher's retired cursors with nothing pending (LIF-1).
func (m *model) dropRetired(w string) {
	for p, c := range m.cursors {
		if p.w == w && c.retired && c.N == c.L {
			m.dropCursor(p)
		}
	}
}

// closeNotice records that c's pending notice was acknowledged.
func (m *model) closeNotice(p pair, c *cur) {
	if m.closed[p] == nil {
		m.closed[p] = map[int64]bool{}
	}
	m.closed[p][c.L] = true
}

func (m *model) dropCursor(p pair) {
	delete(m.cursors, p)
	delete(m.closed, p)
}

// drained is one snapshot of a watcher's pending notices, as a gateway takes them into
// a prompt: the pairs and the notified versions it consumed.
type drained struct {
	watcher string
	notices map[string]int64 // target key → notifiedVersion
	gen     int64            // the watcher's generation when it drained (LIF-2)
}

type machine struct {
	t     *testing.T
	rt    *rapid.T
	db    Database
	store awareness.Store
	svc   *awareness.Service
	now   time.Time
	m     model
	// drains are snapshots taken by drain and not yet acknowledged by ackExact.
	drains []drained
}

func newMachine(t *testing.T, rt *rapid.T, db Database) *machine {
	mc := &machine{t: t, rt: rt, db: db, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		m: model{heads: map[string]int64{}, pruned: map[string]int64{},
			dedupe: map[string]bool{}, cursors: map[pair]*cur{}, closed: map[pair]map[int64]bool{},
			snoozed: map[pair]snooze{}, gen: map[string]int64{}, deleted: map[string]bool{}}}
	mc.open(rt)
	return mc
}

func (mc *machine) open(rt *rapid.T) {
	s, err := mc.db()
	if err != nil {
		rt.Fatalf("open store: %v", err)
	}
	mc.store = s
	mc.svc = awareness.NewService(awareness.Config{Store: s, Now: func() time.Time { return mc.now }})
}

func (mc *machine) close() {
	if mc.store != nil {
		_ = mc.store.Close()
		mc.store = nil
	}
}

func (mc *machine) tick(d time.Duration) { mc.now = mc.now.Add(d) }

func ctx() context.Context { return context.Background() }

func (mc *machine) record(rt *rapid.T) {
	mc.tick(time.Millisecond)
	target := rapid.SampledFrom(targets).Draw(rt, "target")
	kind := rapid.SampledFrom(kinds).Draw(rt, "kind")
	actorChoices := append([]string{"", "human:alice"}, qualified...)
	actor := rapid.SampledFrom(actorChoices).Draw(rt, "actor")
	var passed, sent []string
	for _, w := range qualified {
		if w != target && rapid.IntRange(0, 3).Draw(rt, "pass:"+w) == 0 {
			passed = append(passed, w)
		}
	}
	sent = append(sent, passed...)
	// Watchers that cannot watch are skipped and reported, never refuse the event
	// (WAT-4): a bare key, the session itself, a malformed key.
	var bad []string
	for _, w := range []string{"global", target, "agent:main:"} {
		if rapid.IntRange(0, 5).Draw(rt, "passBad:"+w) == 0 && (w != target || !contains(passed, w)) {
			bad = append(bad, w)
		}
	}
	sent = append(sent, bad...)
	var dk *string
	if rapid.IntRange(0, 4).Draw(rt, "useDedupe") == 0 {
		d := "dk-" + strconv.Itoa(rapid.IntRange(0, 3).Draw(rt, "dedupe"))
		dk = &d
	}
	in := awareness.RecordInput{SessionKey: target, Kind: kind, ActorType: awareness.ActorSystem, Watchers: sent, DedupeKey: dk}
	if actor != "" {
		a := actor
		in.ActorID = &a
		if actor != "human:alice" {
			in.ActorType = awareness.ActorAgent
		} else {
			in.ActorType = awareness.ActorHuman
			// The channel of the latest human event is in the digest (DIG-1).
			if c := rapid.SampledFrom([]string{"", "telegram", "slack"}).Draw(rt, "channel"); c != "" {
				in.Channel = &c
			}
		}
	}
	res, err := mc.svc.RecordEvent(ctx(), in)
	if err != nil {
		rt.Fatalf("record: %v", err)
	}
	var skipped []string
	for _, sw := range res.SkippedWatchers {
		skipped = append(skipped, sw.Watcher)
	}
	if d := cmp.Diff(bad, skipped); d != "" {
		rt.Fatalf("WAT-4: skipped watchers (-want +got):\n%s", d)
	}

	// Model.
	m := &mc.m
	if dk != nil {
		k := target + "\x00" + *dk
		if m.dedupe[k] {
			if res.Recorded {
				rt.Fatalf("SIG-4: duplicate dedupe key %q recorded again", *dk)
			}
			if res.NoticesOpened != 0 {
				rt.Fatalf("SIG-4: deduplicated append opened %d notices", res.NoticesOpened)
			}
			return
		}
		m.dedupe[k] = true
	}
	if !res.Recorded {
		rt.Fatalf("append with a fresh dedupe key was not recorded")
	}
	m.heads[target]++
	s := m.heads[target]
	ev := event{session: target, seq: s, occurred: mc.now}
	if dk != nil {
		ev.dedupe = target + "\x00" + *dk
	}
	m.events = append(m.events, ev)
	if res.Event.Sequence != s || res.StateVersion != s {
		rt.Fatalf("SIG-3: got sequence %d version %d, want %d", res.Event.Sequence, res.StateVersion, s)
	}
	if opened := m.applied(target, kind, s, actor, passed, mc.now); res.NoticesOpened != opened {
		rt.Fatalf("NTC-2: append opened %d notices, model says %d", res.NoticesOpened, opened)
	}
}

// applied applies a recorded event of kind at sequence s on target to the model's
// cursors and returns how many notices it opened. actor is "" for none; passed are
// the producer-passed watchers that can watch. Every append revives a deleted
// session; a deleted event deletes it again after it notified (LIF-1).
func (m *model) applied(target string, kind awareness.EventKind, s int64, actor string, passed []string, now time.Time) int {
	m.deleted[target] = false
	opened := 0
	switch {
	case kind.SeedsWatchers():
		for _, w := range passed {
			p := pair{w, target}
			c := m.cursors[p]
			switch {
			case c == nil:
				m.newCur(p, cur{L: s, N: s, M: s, updated: now})
			case c.N == c.L && c.L < s: // synced: move to the spawn
				c.L, c.N, c.M, c.updated = s, s, s, now
			}
		}
	case kind.StartsIncarnation():
		// LIF-2: a new generation; the cursors the session holds go (WAT-5); those on
		// it close their notice and move to the reset, which no watch here selects.
		m.gen[target] = m.genOf(target) + 1
		for p, c := range m.cursors {
			switch {
			case p.w == target:
				m.dropCursor(p)
			case p.t == target && !c.retired:
				if c.N > c.L {
					m.closeNotice(p, c)
				}
				c.L, c.N, c.M, c.updated, c.tg = s, s, s, now, m.gen[target]
			}
		}
	case kind.Notifies():
		ws := map[string]bool{}
		for p, c := range m.cursors {
			if p.t == target && !c.retired {
				ws[p.w] = true
			}
		}
		for _, w := range passed {
			if c := m.cursors[pair{w, target}]; c == nil || !c.retired {
				ws[w] = true
			}
		}
		for w := range ws {
			if actor == w {
				continue // self-suppression
			}
			p := pair{w, target}
			c := m.cursors[p]
			if c == nil {
				c = m.newCur(p, cur{})
			}
			if c.N == c.L {
				c.N = s
				opened++
			}
			c.M = s
			c.updated = now
		}
		if kind.Retires() {
			m.retire(target, s)
		}
	}
	return opened
}

// retire is what follows a deleted event at s on target once it notified (LIF-1): the
// cursors target holds go, those on it are retired and gone at once when nothing is
// pending, its events before s go, and the session is deleted.
func (m *model) retire(target string, s int64) {
	for p, c := range m.cursors {
		switch {
		case p.w == target:
			m.dropCursor(p)
		case p.t == target && c.N == c.L:
			m.dropCursor(p)
		case p.t == target:
			c.retired = true
		}
	}
	kept := m.events[:0]
	for _, e := range m.events {
		if e.session != target || e.seq >= s {
			kept = append(kept, e)
		} else if e.dedupe != "" {
			delete(m.dedupe, e.dedupe)
		}
	}
	m.events = kept
	m.pruned[target] = max(m.pruned[target], s-1)
	m.deleted[target] = true
}

func (mc *machine) watch(rt *rapid.T) {
	mc.tick(time.Millisecond)
	w := rapid.SampledFrom(qualified).Draw(rt, "watcher")
	t := rapid.SampledFrom(targets).Draw(rt, "target")
	res, err := mc.svc.Watch(ctx(), w, t, nil)
	if err != nil {
		rt.Fatalf("watch: %v", err)
	}
	if w == t {
		if res.Watched {
			rt.Fatalf("WAT-3: self-watch accepted")
		}
		return
	}
	if !res.Watched {
		rt.Fatalf("WAT-3: watch refused: %s", res.Reason)
	}
	p := pair{w, t}
	if mc.m.cursors[p] == nil {
		h := mc.m.heads[t]
		mc.m.newCur(p, cur{L: h, N: h, M: h, updated: mc.now})
	}
}

func (mc *machine) unwatch(rt *rapid.T) {
	w := rapid.SampledFrom(qualified).Draw(rt, "watcher")
	t := rapid.SampledFrom(targets).Draw(rt, "target")
	ok, err := mc.svc.Unwatch(ctx(), w, t, nil)
	if err != nil {
		rt.Fatalf("unwatch: %v", err)
	}
	p := pair{w, t}
	if want := mc.m.cursors[p] != nil; ok != want {
		rt.Fatalf("WAT-5: unwatch returned %v, model has cursor: %v", ok, want)
	}
	mc.m.dropCursor(p)
}

func (mc *machine) ack(rt *rapid.T) {
	mc.tick(time.Millisecond)
	w := rapid.SampledFrom(qualified).Draw(rt, "watcher")
	var ts []string
	all := rapid.Bool().Draw(rt, "all")
	if !all {
		ts = rapid.SliceOfNDistinct(rapid.SampledFrom(targets), 0, 2, rapid.ID[string]).Draw(rt, "targets")
		if ts == nil {
			ts = []string{}
		}
	}
	follow, err := mc.svc.AckNotices(ctx(), w, ts, nil, nil)
	if err != nil {
		rt.Fatalf("ack: %v", err)
	}
	want := 0
	for p, c := range mc.m.cursors {
		if p.w != w || (!all && !contains(ts, p.t)) || c.N == c.L {
			continue
		}
		mc.m.closeNotice(p, c)
		c.L = c.N
		if c.M > c.N {
			c.N = c.M
			want++
		}
		c.updated = mc.now
	}
	if len(follow) != want {
		rt.Fatalf("NTC-3: ack opened %d follow-ups, model says %d", len(follow), want)
	}
	if all || len(ts) > 0 {
		mc.m.dropRetired(w)
	}
}

// drain takes a snapshot of a watcher's pending notices, as a gateway does when it
// builds a prompt; ackExact acknowledges one snapshot later, after any interleaving of
// other steps, restarts included. No notice an acknowledgement closed is ever handed
// out again.
func (mc *machine) drain(rt *rapid.T) {
	w := rapid.SampledFrom(qualified).Draw(rt, "watcher")
	mc.drains = append(mc.drains, mc.drainOf(rt, w))
}

func (mc *machine) drainOf(rt *rapid.T, w string) drained {
	ns, err := mc.svc.PendingNotices(ctx(), w)
	if err != nil {
		rt.Fatalf("pending: %v", err)
	}
	d := drained{watcher: w, notices: map[string]int64{}, gen: mc.m.genOf(w)}
	for _, n := range ns {
		if n.WatcherGeneration != d.gen {
			rt.Fatalf("LIF-2: %s's notice on %s carries watcher generation %d, model says %d", w, n.Target.Key, n.WatcherGeneration, d.gen)
		}
		if mc.m.closed[pair{w, n.Target.Key}][n.ChangesSince] {
			rt.Fatalf("NTC-3, NTC-5: a notice handed out twice: %s on %s changesSince %d was acknowledged already",
				w, n.Target.Key, n.ChangesSince)
		}
		d.notices[n.Target.Key] = n.NotifiedVersion
	}
	return d
}

// ackExact acknowledges a drained snapshot exactly (NTC-3), by acknowledgeNotices
// with its answer per notice or by ackNotices(notices:) with its follow-ups. The
// property: a pair is acknowledged only when its pending notice is the one drained;
// every notice opened after the drain stays pending exactly as it was; and the
// answer per notice is the model's.
func (mc *machine) ackExact(rt *rapid.T) {
	if len(mc.drains) == 0 {
		rt.Skip("nothing drained")
	}
	i := rapid.IntRange(0, len(mc.drains)-1).Draw(rt, "drain")
	d := mc.drains[i]
	mc.drains = append(mc.drains[:i], mc.drains[i+1:]...)
	mc.ackDrained(rt, d, rapid.Bool().Draw(rt, "perNotice"))
}

// drainRestartAck is a gateway's turn across a restart of the service: it drains the
// watcher's notices, the service restarts and runs its startup sweep, and the exact
// acknowledgement of what was drained acknowledges every one of them (NTC-5).
func (mc *machine) drainRestartAck(rt *rapid.T) {
	w := rapid.SampledFrom(qualified).Draw(rt, "watcher")
	d := mc.drainOf(rt, w)
	mc.restart(rt)
	for _, o := range mc.ackDrained(rt, d, true) {
		if o.Outcome != awareness.AckAcknowledged {
			rt.Fatalf("NTC-5: the exact ack after a restart of a notice drained before it: %s on %s N=%d %s, want acknowledged",
				w, o.Target.Key, o.NotifiedVersion, o.Outcome)
		}
	}
}

// ackDrained acknowledges d exactly and applies it to the model; with perNotice it
// uses acknowledgeNotices and compares its answer with the model's.
func (mc *machine) ackDrained(rt *rapid.T, d drained, perNotice bool) []awareness.NoticeAck {
	mc.tick(time.Millisecond)
	targets := make([]string, 0, len(d.notices))
	for t := range d.notices {
		targets = append(targets, t)
	}
	sort.Strings(targets)
	refs := []awareness.NoticeRef{}
	// A gateway may name the generation it drained in (LIF-2).
	var gen *int64
	if rapid.Bool().Draw(mc.rt, "nameGeneration") {
		gen = ptr(d.gen)
	}
	for _, t := range targets {
		refs = append(refs, awareness.NoticeRef{Target: t, NotifiedVersion: d.notices[t], WatcherGeneration: gen})
	}
	if gen != nil && len(refs) > 0 && d.gen < mc.m.genOf(d.watcher) {
		// Drained by an earlier generation of the watcher: refused, nothing
		// acknowledged, whatever the pairs hold now (LIF-2).
		var err error
		if perNotice {
			_, err = mc.svc.AcknowledgeNotices(ctx(), d.watcher, refs)
		} else {
			_, err = mc.svc.AckNotices(ctx(), d.watcher, nil, nil, refs)
		}
		if awareness.ErrorCode(err) != awareness.ESTALEGENERATION {
			rt.Fatalf("LIF-2: an exact ack drained in generation %d of %s (now %d): got %v, want STALE_GENERATION",
				d.gen, d.watcher, mc.m.genOf(d.watcher), err)
		}
		return nil
	}
	// The model's answer, before it moves.
	type answer struct {
		outcome         awareness.AckOutcome
		follow, pending int64 // notifiedVersion; 0 for none
	}
	want := make([]answer, len(refs))
	for i, r := range refs {
		c := mc.m.cursors[pair{d.watcher, r.Target}]
		switch {
		case c == nil:
			want[i].outcome = awareness.AckNotPending
		case c.N > c.L && c.N == r.NotifiedVersion:
			want[i].outcome = awareness.AckAcknowledged
			if c.M > c.N {
				want[i].follow = c.M
			}
		case c.L >= r.NotifiedVersion:
			want[i].outcome = awareness.AckAlreadyAcknowledged
		case c.N > c.L:
			want[i].outcome = awareness.AckSuperseded
		default:
			want[i].outcome = awareness.AckNotPending
		}
		if o := want[i].outcome; (o == awareness.AckAlreadyAcknowledged || o == awareness.AckSuperseded) && c.N > c.L {
			want[i].pending = c.N
		}
	}
	var (
		acks   []awareness.NoticeAck
		follow int
	)
	if perNotice {
		var err error
		acks, err = mc.svc.AcknowledgeNotices(ctx(), d.watcher, refs)
		if err != nil {
			rt.Fatalf("acknowledgeNotices: %v", err)
		}
		if len(acks) != len(refs) {
			rt.Fatalf("NTC-3: %d answers for %d notices", len(acks), len(refs))
		}
		for i, a := range acks {
			got := answer{outcome: a.Outcome}
			if a.FollowUp != nil {
				got.follow = a.FollowUp.NotifiedVersion
				follow++
			}
			if a.Pending != nil {
				got.pending = a.Pending.NotifiedVersion
			}
			if a.Target.Key != refs[i].Target || a.NotifiedVersion != refs[i].NotifiedVersion || got != want[i] {
				rt.Fatalf("NTC-3: %s's notice on %s N=%d: got %+v, model says %+v", d.watcher, refs[i].Target, refs[i].NotifiedVersion, got, want[i])
			}
		}
	} else {
		fs, err := mc.svc.AckNotices(ctx(), d.watcher, nil, nil, refs)
		if err != nil {
			rt.Fatalf("ack exact: %v", err)
		}
		follow = len(fs)
	}
	opened := 0
	for i, r := range refs {
		if want[i].outcome != awareness.AckAcknowledged {
			continue // not pending, or its pending notice is not the drained one: left alone
		}
		p := pair{d.watcher, r.Target}
		c := mc.m.cursors[p]
		mc.m.closeNotice(p, c)
		c.L = c.N
		if c.M > c.N {
			c.N = c.M
			opened++
		}
		c.updated = mc.now
	}
	if follow != opened {
		rt.Fatalf("NTC-3: exact ack opened %d follow-ups, model says %d", follow, opened)
	}
	if len(refs) > 0 {
		mc.m.dropRetired(d.watcher)
	}
	return acks
}

// reset is resetSession (LIF-1): the reset event's append, as record with kind reset.
func (mc *machine) reset(rt *rapid.T) {
	mc.tick(time.Millisecond)
	k := rapid.SampledFrom(targets).Draw(rt, "session")
	if _, err := mc.svc.ResetSession(ctx(), k, nil); err != nil {
		rt.Fatalf("reset: %v", err)
	}
	m := &mc.m
	m.heads[k]++
	m.events = append(m.events, event{session: k, seq: m.heads[k], occurred: mc.now})
	m.applied(k, awareness.Reset, m.heads[k], "", nil, mc.now)
}

// delete is deleteSession (LIF-1): the deleted event's append on a live session; on
// one without a head, or deleted already, only the cursors in both directions go.
func (mc *machine) delete(rt *rapid.T) {
	mc.tick(time.Millisecond)
	t := rapid.SampledFrom(targets).Draw(rt, "session")
	ok, err := mc.svc.DeleteSession(ctx(), t, nil)
	if err != nil {
		rt.Fatalf("delete: %v", err)
	}
	m := &mc.m
	live := m.heads[t] > 0 && !m.deleted[t]
	if ok != live {
		rt.Fatalf("LIF-1: deleteSession(%s) = %v, model says the session is live: %v", t, ok, live)
	}
	if live {
		m.heads[t]++
		m.events = append(m.events, event{session: t, seq: m.heads[t], occurred: mc.now})
		m.applied(t, awareness.Deleted, m.heads[t], "", nil, mc.now)
		return
	}
	for p := range m.cursors {
		if p.w == t || p.t == t {
			m.dropCursor(p)
		}
	}
}

func (mc *machine) prune(rt *rapid.T) {
	advance := rapid.SampledFrom([]time.Duration{0, time.Hour, 10 * 24 * time.Hour, 31 * 24 * time.Hour}).Draw(rt, "advance")
	mc.tick(advance)
	maxRows := rapid.IntRange(1, 40).Draw(rt, "maxRows")
	const ttl = 30 * 24 * time.Hour
	pol := awareness.RetentionPolicy{MaxAge: ttl, MaxRows: maxRows, CursorTTL: ttl}
	if _, err := mc.store.Prune(ctx(), pol, mc.now); err != nil {
		rt.Fatalf("prune: %v", err)
	}
	m := &mc.m
	cut := mc.now.Add(-ttl)
	var kept []event
	for _, e := range m.events {
		if e.occurred.Before(cut) {
			m.pruned[e.session] = max(m.pruned[e.session], e.seq)
			delete(m.dedupe, e.dedupe)
			continue
		}
		kept = append(kept, e)
	}
	if extra := len(kept) - maxRows; extra > 0 {
		for _, e := range kept[:extra] {
			m.pruned[e.session] = max(m.pruned[e.session], e.seq)
			delete(m.dedupe, e.dedupe)
		}
		kept = kept[extra:]
	}
	m.events = kept
	for p, c := range m.cursors {
		if c.updated.Before(cut) {
			m.dropCursor(p)
		}
	}
}

func (mc *machine) restart(rt *rapid.T) {
	mc.close()
	mc.open(rt)
	mc.tick(time.Millisecond)
	n, err := mc.svc.Sweep(ctx())
	if err != nil {
		rt.Fatalf("sweep: %v", err)
	}
	// Every pending notice survives unchanged, and no committed write leaves a cursor
	// with M > N == L: the sweep opens nothing (NTC-5).
	if n != 0 {
		rt.Fatalf("NTC-5: the startup sweep opened %d notices, model says none", n)
	}
}

// otherStart is another process starting on the same database while this one runs:
// its store opens beside this one's and its startup sweep runs, which changes no
// pending notice (NTC-5), then it stops.
func (mc *machine) otherStart(rt *rapid.T) {
	s, err := mc.db()
	if err != nil {
		rt.Fatalf("open the other process's store: %v", err)
	}
	defer s.Close()
	other := awareness.NewService(awareness.Config{Store: s, Now: func() time.Time { return mc.now }})
	n, err := other.Sweep(ctx())
	other.Hub().Close()
	if err != nil {
		rt.Fatalf("the other process's sweep: %v", err)
	}
	if n != 0 {
		rt.Fatalf("NTC-5: another process's startup sweep opened %d notices, model says none", n)
	}
}
