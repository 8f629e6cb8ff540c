// Package storetest is the conformance suite of awareness.Store: every backend (SQLite,
// PostgreSQL and the core's in-memory test store) runs the same behaviours through Run.
//
// Subtests are named after the requirement ids of SPEC.md. The suite only uses the Store
// interface and builds its events through awareness.ValidateRecord, so it makes no
// assumption about the database behind it.
package storetest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/awareness/awareness/internal/awareness"
)

// RunAll runs every conformance suite on one backend, as subtests: the one entry point a
// backend registers. open must return a new, empty store and register its Close with
// t.Cleanup; plant writes a cursor row as given (RunSweep).
func RunAll(t *testing.T, open func(t *testing.T) awareness.Store, plant Plant) {
	t.Run("Store", func(t *testing.T) { Run(t, open) })
	t.Run("Sweep", func(t *testing.T) { RunSweep(t, open, plant) })
	t.Run("Registry", func(t *testing.T) { RunRegistry(t, open) })
	t.Run("Activity", func(t *testing.T) { RunActivity(t, open) })
	t.Run("Upstream", func(t *testing.T) { RunUpstream(t, open) })
}

// Run runs the suite of the signal log and the notices. open must return a new, empty store and register its Close with
// t.Cleanup; Close must tolerate being called twice.
func Run(t *testing.T, open func(t *testing.T) awareness.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, f *fixture)
	}{
		{"SIG-2_event_round_trip_exact_times", testEventRoundTrip},
		{"SIG-3_dense_sequences", testDenseSequences},
		{"SIG-3_concurrent_appends_dense", testConcurrentAppendsDense},
		{"SIG-4_dedupe", testDedupe},
		{"SIG-6_heads_survive_pruning", testHeadsSurvivePruning},
		{"SIG-6_watermark_stamping", testWatermarkStamping},
		{"SIG-6_row_cap_keeps_exactly_cap", testRowCap},
		{"SIG-6_time_pruning_injected_clock", testTimePruning},
		{"REC-2_history_gap_boundaries", testHistoryGapBoundaries},
		{"REC-1_read_status_is_changes_and_session", testReadStatus},
		{"REC-1_read_status_one_snapshot", testReadStatusSnapshot},
		{"REC-5_sessions_list_and_rows", testSessionsList},
		{"KEY-1_composite_identity", testCompositeIdentity},
		{"WAT-2_child_spawned_seeds", testChildSpawnedSeeds},
		{"WAT-3_watch_at_head_rewatch_keeps_state", testWatch},
		{"WAT-4_producer_passed_watcher_starts_at_zero", testProducerPassedWatcher},
		{"WAT-5_delete_keeps_head", testDeleteKeepsHead},
		{"WAT-5_reset_and_cursor_expiry", testResetAndExpiry},
		{"WAT-5_cursor_expiry_once_per_period", testExpiryPeriod},
		{"NTC-2_one_notice_for_twenty_changes", testOneNoticeForTwenty},
		{"NTC-2_self_suppression", testSelfSuppression},
		{"NTC-2_set_based_open_equals_per_cursor", testSetBasedOpen},
		{"NTC-3_ack_reopens_once", testAckReopensOnce},
		{"NTC-3_exact_ack_leaves_a_newer_notice_alone", testAckExact},
		{"NTC-3_targets_are_agent_qualified", testAckTargetsPerAgent},
		{"NTC-3_ack_history_written_with_the_ack", testAckHistory},
		{"SIG-6_WAT-5_ack_history_retention_and_deletion", testAckHistoryRetention},
		{"WAT-2_spawns_name_parents", testSpawns},
		{"NTC-7_removed_cursors_return_closed_notices", testRemovalsCloseNotices},
		{"NTC-4_log_only_kinds_never_notify", testLogOnlyKinds},
		{"NTC-5_sweep_keeps_pending_notices", testSweep},
		{"NTC-3_exact_ack_outcomes_per_notice", testAckOutcomes},
		{"NTC-7_pending_order_and_identity", testPendingOrder},
		{"DIG-1_digest_counts_the_range", testDigest},
		{"DIG-1_digest_after_pruning_counts_what_remains", testDigestPruned},
		{"DIG-1_digest_refuses_a_bad_range", testDigestBadRange},
		{"RDL-1_RDL-2_notice_holds_round_trip", testHolds},
		{"RDL-1_redelivery_under_failing_turns", testRedeliveryUnderFailingTurns},
		{"RDL-1_redelivery_is_published", testRedeliveryPublished},
		{"RDL-2_snooze_wakes_and_dismiss_records", testSnooze},
		{"Append_batch_atomic", testBatchAtomic},
		{"Stats_and_ping", testStatsAndPing},
		{"ERR-1_closed_store_unavailable", testClosed},
	}
	tests = append(tests, lifecycleTests...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, &fixture{t: t, s: open(t), ctx: t.Context()})
		})
	}
}

// Keys used across the suite.
const (
	parentKey = "agent:main:main"
	childKey  = "agent:main:subagent:c1"
	child2Key = "agent:main:subagent:c2"
	targetKey = "agent:main:direct:alice"
	opsKey    = "agent:ops:main"
)

// t0 has a sub-microsecond part so that any rounding of stored times shows.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

var emptyOK = cmpopts.EquateEmpty()

// ignoreAcks compares AckResults without what they say per named notice.
var ignoreAcks = cmpopts.IgnoreFields(awareness.AckResult{}, "Acks")

type fixture struct {
	t   *testing.T
	s   awareness.Store
	ctx context.Context
}

// deleteSession is Store.DeleteSession as a yes or no: ok when the deleted event was
// recorded, closed every pending notice it closed.
func deleteSession(ctx context.Context, s awareness.Store, r awareness.SessionRef, now time.Time) (bool, []awareness.Notice, error) {
	op, closed, err := s.DeleteSession(ctx, r, now)
	if op != nil {
		closed = append(closed, op.Closed...)
	}
	return op != nil, closed, err
}

func ref(t *testing.T, key string, agent ...string) awareness.SessionRef {
	t.Helper()
	var a *string
	if len(agent) > 0 {
		a = &agent[0]
	}
	r, err := awareness.ResolveSession(key, a)
	if err != nil {
		t.Fatalf("ResolveSession(%q): %v", key, err)
	}
	return r
}

func ptr[T any](v T) *T { return &v }

// human is a direct human message into key, by a person.
func human(key string, watchers ...string) awareness.RecordInput {
	return awareness.RecordInput{SessionKey: key, Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman,
		ActorID: ptr("+15550100"), Channel: ptr("telegram"), Watchers: watchers}
}

// byAgent is an event of kind on key caused by the agent session actor.
func byAgent(key string, kind awareness.EventKind, actor string, watchers ...string) awareness.RecordInput {
	return awareness.RecordInput{SessionKey: key, Kind: kind, ActorType: awareness.ActorAgent, ActorID: ptr(actor),
		Watchers: watchers}
}

// system is an event of kind on key by the system.
func system(key string, kind awareness.EventKind) awareness.RecordInput {
	return awareness.RecordInput{SessionKey: key, Kind: kind, ActorType: awareness.ActorSystem}
}

func (f *fixture) op(in awareness.RecordInput, now time.Time) *awareness.AppendOp {
	f.t.Helper()
	ne, err := awareness.ValidateRecord(in, now)
	if err != nil {
		f.t.Fatalf("ValidateRecord(%+v): %v", in, err)
	}
	return awareness.NewAppendOp(ne, now)
}

func (f *fixture) append(now time.Time, ins ...awareness.RecordInput) []*awareness.AppendOp {
	f.t.Helper()
	ops := make([]*awareness.AppendOp, len(ins))
	for i, in := range ins {
		ops[i] = f.op(in, now)
	}
	if err := f.s.Append(f.ctx, ops); err != nil {
		f.t.Fatalf("Append: %v", err)
	}
	return ops
}

// ack runs Store.Ack at now and fails the test on an error.
func (f *fixture) ack(req awareness.AckRequest, now time.Time) awareness.AckResult {
	f.t.Helper()
	req.Now = now
	res, err := f.s.Ack(f.ctx, req)
	if err != nil {
		f.t.Fatalf("Ack(%+v): %v", req, err)
	}
	return res
}

func (f *fixture) append1(now time.Time, in awareness.RecordInput) *awareness.AppendOp {
	f.t.Helper()
	return f.append(now, in)[0]
}

func (f *fixture) read(r awareness.SessionRef, after int64, limit int) awareness.Changes {
	f.t.Helper()
	ch, err := f.s.ReadChanges(f.ctx, r, after, limit)
	if err != nil {
		f.t.Fatalf("ReadChanges(%v, %d, %d): %v", r, after, limit, err)
	}
	return ch
}

// status checks that ReadStatus answers what ReadChanges and Session answer when
// nothing writes in between, and returns it.
func (f *fixture) status(r awareness.SessionRef, after int64, limit int) (awareness.Changes, *awareness.Session) {
	f.t.Helper()
	ch, sess, err := f.s.ReadStatus(f.ctx, r, after, limit)
	if err != nil {
		f.t.Fatalf("ReadStatus(%v, %d, %d): %v", r, after, limit, err)
	}
	if diff := cmp.Diff(f.read(r, after, limit), ch, emptyOK); diff != "" {
		f.t.Errorf("ReadStatus(%v, %d, %d) changes differ from ReadChanges (-want +got):\n%s", r, after, limit, diff)
	}
	var want *awareness.Session
	if s, ok, err := f.s.Session(f.ctx, r); err != nil {
		f.t.Fatalf("Session(%v): %v", r, err)
	} else if ok {
		want = &s
	}
	if diff := cmp.Diff(want, sess, emptyOK); diff != "" {
		f.t.Errorf("ReadStatus(%v) session differs from Session (-want +got):\n%s", r, diff)
	}
	return ch, sess
}

func (f *fixture) watch(watcher string, target awareness.SessionRef, now time.Time) awareness.Cursor {
	f.t.Helper()
	c, _, err := f.s.Watch(f.ctx, watcher, target, "", now)
	if err != nil {
		f.t.Fatalf("Watch(%s, %v): %v", watcher, target, err)
	}
	return c
}

// cursor returns the one cursor of (watcher, target); ok is false when there is none.
func (f *fixture) cursor(watcher string, target awareness.SessionRef) (awareness.Cursor, bool) {
	f.t.Helper()
	cs, err := f.s.Cursors(f.ctx, awareness.CursorQuery{Watcher: watcher, TargetAgent: target.AgentID, TargetKey: target.Key})
	if err != nil {
		f.t.Fatalf("Cursors: %v", err)
	}
	switch len(cs) {
	case 0:
		return awareness.Cursor{}, false
	case 1:
		return cs[0], true
	}
	f.t.Fatalf("Cursors(%s, %v) = %d cursors, want at most 1", watcher, target, len(cs))
	return awareness.Cursor{}, false
}

func (f *fixture) mustCursor(watcher string, target awareness.SessionRef) awareness.Cursor {
	f.t.Helper()
	c, ok := f.cursor(watcher, target)
	if !ok {
		f.t.Fatalf("no cursor for (%s, %v)", watcher, target)
	}
	return c
}

func (f *fixture) pending(watcher string) []awareness.Notice {
	f.t.Helper()
	ns, err := f.s.Pending(f.ctx, watcher)
	if err != nil {
		f.t.Fatalf("Pending(%q): %v", watcher, err)
	}
	return ns
}

func (f *fixture) prune(p awareness.RetentionPolicy, now time.Time) awareness.PruneResult {
	f.t.Helper()
	res, err := f.s.Prune(f.ctx, p, now)
	if err != nil {
		f.t.Fatalf("Prune: %v", err)
	}
	return res
}

func (f *fixture) stats() awareness.Stats {
	f.t.Helper()
	st, err := f.s.Stats(f.ctx)
	if err != nil {
		f.t.Fatalf("Stats: %v", err)
	}
	return st
}

func seqs(evs []awareness.Event) []int64 {
	var out []int64
	for _, e := range evs {
		out = append(out, e.Sequence)
	}
	return out
}

func seqRange(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func notice(watcher string, target awareness.SessionRef, l, n, m int64, opened time.Time) awareness.Notice {
	return awareness.Notice{
		Watcher: watcher, Target: target, ChangesSince: l, NotifiedVersion: n, MaterialVersion: m,
		Text: awareness.NoticeTextOf(target, l), Wake: awareness.WakeFor(watcher), OpenedAt: opened,
		TargetGeneration: 1, WatcherGeneration: 1,
	}
}

// ---------------------------------------------------------------------------------------

func testEventRoundTrip(t *testing.T, f *fixture) {
	r := ref(t, targetKey)
	occurred := t0.Add(-90 * time.Minute).Add(987 * time.Nanosecond)
	in := awareness.RecordInput{
		SessionKey: targetKey, Kind: awareness.RunFailed, ActorType: awareness.ActorAgent,
		ActorID: ptr(childKey), Summary: ptr("child run timed out after 10m"), OccurredAt: &occurred,
		RunID: ptr("run-42"), Outcome: ptr(awareness.OutcomeTimeout), Channel: ptr("cli"), Turns: ptr(3),
		DedupeKey: ptr("dd-1"),
	}
	now := t0.Add(17 * time.Nanosecond).In(time.FixedZone("X", 3600))
	op := f.append1(now, in)
	want := awareness.Event{
		Session: r, Sequence: 1, Kind: awareness.RunFailed, ActorType: awareness.ActorAgent, ActorID: childKey,
		Summary: "child run timed out after 10m", OccurredAt: occurred, RunID: "run-42",
		Payload:   awareness.Payload{Outcome: awareness.OutcomeTimeout, Channel: "cli", Turns: 3},
		DedupeKey: "dd-1", RecordedAt: now,
	}
	if diff := cmp.Diff(want, op.Event); diff != "" {
		t.Errorf("Append event mismatch (-want +got):\n%s", diff)
	}
	ch := f.read(r, 0, 10)
	if diff := cmp.Diff([]awareness.Event{want}, ch.Events); diff != "" {
		t.Errorf("ReadChanges events mismatch (-want +got):\n%s", diff)
	}
	if got := ch.Events[0].RecordedAt.UnixNano(); got != now.UnixNano() {
		t.Errorf("RecordedAt nanos: got %d, want %d", got, now.UnixNano())
	}
	if got := ch.Events[0].OccurredAt.UnixNano(); got != occurred.UnixNano() {
		t.Errorf("OccurredAt nanos: got %d, want %d", got, occurred.UnixNano())
	}
	if !ch.Head.UpdatedAt.Equal(now) {
		t.Errorf("Head.UpdatedAt: got %v, want %v", ch.Head.UpdatedAt, now)
	}
	// A payload-less event stores no payload.
	op2 := f.append1(now, system(targetKey, awareness.Compacted))
	if !op2.Event.Payload.IsZero() {
		t.Errorf("payload: got %+v, want zero", op2.Event.Payload)
	}
	// A page reads each row on its own: the empty optional columns of the second event
	// neither keep the first's values nor leak into the third's.
	in.DedupeKey = ptr("dd-2")
	op3 := f.append1(now, in)
	page := f.read(r, 0, 10)
	if diff := cmp.Diff([]awareness.Event{op.Event, op2.Event, op3.Event}, page.Events); diff != "" {
		t.Errorf("ReadChanges page mismatch (-want +got):\n%s", diff)
	}
	if page.Events[1].ActorID != "" || page.Events[1].RunID != "" || page.Events[1].DedupeKey != "" {
		t.Errorf("payload-less event read back with optional fields: %+v", page.Events[1])
	}
}

func testDenseSequences(t *testing.T, f *fixture) {
	a, b := ref(t, parentKey), ref(t, childKey)
	now := t0
	var gotA, gotB []int64
	for i := 0; i < 5; i++ {
		now = now.Add(time.Second)
		gotA = append(gotA, f.append1(now, human(parentKey)).Version)
		if i%2 == 0 {
			gotB = append(gotB, f.append1(now, system(childKey, awareness.RunCompleted)).Version)
		}
	}
	if diff := cmp.Diff(seqRange(1, 5), gotA); diff != "" {
		t.Errorf("versions of A (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(seqRange(1, 3), gotB); diff != "" {
		t.Errorf("versions of B (-want +got):\n%s", diff)
	}

	tests := []struct {
		name      string
		ref       awareness.SessionRef
		after     int64
		limit     int
		wantSeqs  []int64
		wantMore  bool
		wantVer   int64
		wantFirst int64
	}{
		{"all", a, 0, 100, seqRange(1, 5), false, 5, 1},
		{"page", a, 2, 2, []int64{3, 4}, true, 5, 1},
		{"last page exact", a, 3, 2, []int64{4, 5}, false, 5, 1},
		{"at head", a, 5, 10, nil, false, 5, 1},
		{"other session", b, 1, 10, []int64{2, 3}, false, 3, 1},
		{"zero limit", a, 0, 0, nil, true, 5, 1},
		{"no head", ref(t, "agent:main:nobody"), 0, 10, nil, false, 0, 1},
	}
	for _, tt := range tests {
		ch := f.read(tt.ref, tt.after, tt.limit)
		if diff := cmp.Diff(tt.wantSeqs, seqs(ch.Events), emptyOK); diff != "" {
			t.Errorf("%s: sequences (-want +got):\n%s", tt.name, diff)
		}
		if ch.More != tt.wantMore || ch.Head.Version != tt.wantVer || ch.Earliest != tt.wantFirst {
			t.Errorf("%s: got More=%v Version=%d Earliest=%d, want %v %d %d",
				tt.name, ch.More, ch.Head.Version, ch.Earliest, tt.wantMore, tt.wantVer, tt.wantFirst)
		}
		if ch.Head.Session != tt.ref {
			t.Errorf("%s: Head.Session: got %v, want %v", tt.name, ch.Head.Session, tt.ref)
		}
	}
}

func testConcurrentAppendsDense(t *testing.T, f *fixture) {
	const workers, each = 8, 100
	r := ref(t, targetKey)
	var (
		mu       sync.Mutex
		versions []int64
		wg       sync.WaitGroup
		errs     = make(chan error, workers)
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				now := t0.Add(time.Duration(w*each+i) * time.Millisecond)
				ne, err := awareness.ValidateRecord(human(targetKey), now)
				if err != nil {
					errs <- err
					return
				}
				op := awareness.NewAppendOp(ne, now)
				if err := f.s.Append(f.ctx, []*awareness.AppendOp{op}); err != nil {
					errs <- fmt.Errorf("worker %d append %d: %w", w, i, err)
					return
				}
				mu.Lock()
				versions = append(versions, op.Version)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	slices.Sort(versions)
	if diff := cmp.Diff(seqRange(1, workers*each), versions); diff != "" {
		t.Errorf("versions (-want +got):\n%s", diff)
	}
	ch := f.read(r, 0, workers*each+1)
	if diff := cmp.Diff(seqRange(1, workers*each), seqs(ch.Events)); diff != "" {
		t.Errorf("logged sequences (-want +got):\n%s", diff)
	}
	if got, want := ch.Head.Version, int64(workers*each); got != want {
		t.Errorf("head: got %d, want %d", got, want)
	}
}

func testDedupe(t *testing.T, f *fixture) {
	r := ref(t, targetKey)
	f.watch(parentKey, r, t0)
	in := human(targetKey)
	in.DedupeKey = ptr("msg-1")
	first := f.append1(t0.Add(time.Second), in)
	if !first.Recorded || first.Version != 1 || len(first.Opened) != 1 {
		t.Fatalf("first append: got Recorded=%v Version=%d Opened=%d, want true 1 1", first.Recorded, first.Version, len(first.Opened))
	}
	f.append1(t0.Add(2*time.Second), system(targetKey, awareness.RunCompleted))
	before := f.mustCursor(parentKey, r)

	again := in
	again.Summary = ptr("a different summary")
	second := f.append1(t0.Add(3*time.Second), again)
	if second.Recorded {
		t.Errorf("second append: Recorded = true, want false")
	}
	if second.Version != 2 {
		t.Errorf("second append: Version = %d, want the current head 2", second.Version)
	}
	if diff := cmp.Diff(first.Event, second.Event); diff != "" {
		t.Errorf("deduplicated event is not the first one (-want +got):\n%s", diff)
	}
	if len(second.Opened) != 0 {
		t.Errorf("deduplicated append opened %d notices, want 0", len(second.Opened))
	}
	if diff := cmp.Diff(before, f.mustCursor(parentKey, r)); diff != "" {
		t.Errorf("deduplicated append moved a cursor (-want +got):\n%s", diff)
	}
	if got := f.read(r, 0, 10).Head.Version; got != 2 {
		t.Errorf("head after dedupe: got %d, want 2", got)
	}
	// The key is per session.
	other := human(childKey)
	other.DedupeKey = ptr("msg-1")
	if op := f.append1(t0.Add(4*time.Second), other); !op.Recorded || op.Version != 1 {
		t.Errorf("same key on another session: got Recorded=%v Version=%d, want true 1", op.Recorded, op.Version)
	}
}

func testHeadsSurvivePruning(t *testing.T, f *fixture) {
	r := ref(t, targetKey)
	f.append(t0, human(targetKey), human(targetKey), human(targetKey))
	res := f.prune(awareness.RetentionPolicy{MaxAge: time.Hour}, t0.Add(2*time.Hour))
	if diff := cmp.Diff(awareness.PruneResult{EventsDeleted: 3, SessionsStamped: 1}, res); diff != "" {
		t.Errorf("prune result (-want +got):\n%s", diff)
	}
	ch := f.read(r, 0, 10)
	if ch.Head.Version != 3 || ch.Head.PrunedThrough != 3 || ch.Earliest != 4 || len(ch.Events) != 0 {
		t.Errorf("after prune: got Version=%d PrunedThrough=%d Earliest=%d events=%v, want 3 3 4 none",
			ch.Head.Version, ch.Head.PrunedThrough, ch.Earliest, seqs(ch.Events))
	}
	s, ok, err := f.s.Session(f.ctx, r)
	if err != nil || !ok || s.StateVersion != 3 {
		t.Errorf("Session after prune: got %+v, %v, %v, want StateVersion 3", s, ok, err)
	}
	if op := f.append1(t0.Add(3*time.Hour), human(targetKey)); op.Version != 4 {
		t.Errorf("append after prune: got version %d, want 4", op.Version)
	}
	// Pruning again with nothing old changes nothing.
	if res := f.prune(awareness.RetentionPolicy{MaxAge: time.Hour}, t0.Add(3*time.Hour)); !cmp.Equal(res, awareness.PruneResult{}, emptyOK) {
		t.Errorf("second prune: got %+v, want nothing", res)
	}
	if ch := f.read(r, 0, 10); ch.Head.Version != 4 || ch.Head.PrunedThrough != 3 || ch.Earliest != 4 {
		t.Errorf("head after second prune: got Version=%d PrunedThrough=%d Earliest=%d, want 4 3 4",
			ch.Head.Version, ch.Head.PrunedThrough, ch.Earliest)
	}
}

func testWatermarkStamping(t *testing.T, f *fixture) {
	a, b := ref(t, targetKey), ref(t, childKey)
	f.append(t0, human(targetKey), human(targetKey), human(targetKey), human(childKey))
	f.append(t0.Add(2*time.Hour), human(targetKey), human(targetKey), human(childKey))
	res := f.prune(awareness.RetentionPolicy{MaxAge: time.Hour}, t0.Add(2*time.Hour+30*time.Minute))
	if diff := cmp.Diff(awareness.PruneResult{EventsDeleted: 4, SessionsStamped: 2}, res); diff != "" {
		t.Errorf("prune result (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		ref                   awareness.SessionRef
		version, pruned, from int64
		retained              []int64
	}{
		{a, 5, 3, 4, []int64{4, 5}},
		{b, 2, 1, 2, []int64{2}},
	} {
		ch := f.read(tt.ref, 0, 10)
		if ch.Head.Version != tt.version || ch.Head.PrunedThrough != tt.pruned || ch.Earliest != tt.from {
			t.Errorf("%v: got Version=%d PrunedThrough=%d Earliest=%d, want %d %d %d", tt.ref.Key,
				ch.Head.Version, ch.Head.PrunedThrough, ch.Earliest, tt.version, tt.pruned, tt.from)
		}
		if diff := cmp.Diff(tt.retained, seqs(ch.Events)); diff != "" {
			t.Errorf("%v: retained (-want +got):\n%s", tt.ref.Key, diff)
		}
	}
}

func testRowCap(t *testing.T, f *fixture) {
	keys := []string{parentKey, childKey, targetKey}
	type rec struct {
		key string
		seq int64
	}
	var order []rec // recorded order
	now := t0
	for i := 0; i < 10; i++ {
		for _, k := range keys {
			now = now.Add(time.Second)
			op := f.append1(now, human(k))
			order = append(order, rec{k, op.Version})
		}
	}
	// Five events in one batch share one recorded time.
	now = now.Add(time.Second)
	for _, op := range f.append(now, human(targetKey), human(parentKey), human(targetKey), human(childKey), human(targetKey)) {
		order = append(order, rec{op.Event.Session.Key, op.Version})
	}
	const limit = 7
	res := f.prune(awareness.RetentionPolicy{MaxRows: limit}, now)
	if got, want := res.EventsDeleted, int64(len(order)-limit); got != want {
		t.Errorf("EventsDeleted: got %d, want %d", got, want)
	}
	if got := f.stats().Events; got != limit {
		t.Errorf("events left: got %d, want exactly %d", got, limit)
	}
	// Whatever is kept is a suffix of each session's log, and the watermark is exact.
	kept := 0
	for _, k := range keys {
		ch := f.read(ref(t, k), 0, 100)
		kept += len(ch.Events)
		want := seqRange(ch.Head.PrunedThrough+1, ch.Head.Version)
		if diff := cmp.Diff(want, seqs(ch.Events), emptyOK); diff != "" {
			t.Errorf("%s: retained events are not (PrunedThrough, Version] (-want +got):\n%s", k, diff)
		}
	}
	if kept != limit {
		t.Errorf("retained across sessions: got %d, want %d", kept, limit)
	}
	// Only sessions with events among the newest `limit` keep rows, and the newest
	// record of every session is kept.
	newest := map[string]bool{}
	for _, r := range order[len(order)-limit:] {
		newest[r.key] = true
	}
	for _, k := range keys {
		ch := f.read(ref(t, k), 0, 100)
		if got := len(ch.Events) > 0; got != newest[k] {
			t.Errorf("%s retains events: got %v, want %v", k, got, newest[k])
		}
	}
	if res := f.prune(awareness.RetentionPolicy{MaxRows: limit}, now); res.EventsDeleted != 0 {
		t.Errorf("second prune deleted %d, want 0", res.EventsDeleted)
	}
	if res := f.prune(awareness.RetentionPolicy{MaxRows: 1000}, now); res.EventsDeleted != 0 {
		t.Errorf("prune under the cap deleted %d, want 0", res.EventsDeleted)
	}
}

func testTimePruning(t *testing.T, f *fixture) {
	r := ref(t, targetKey)
	day := 24 * time.Hour
	for i := 0; i < 3; i++ {
		f.append1(t0.Add(time.Duration(i)*day), human(targetKey)) // occurredAt defaults to now
	}
	// An event that occurred an hour before it was recorded (SIG-5).
	past := t0.Add(3*day - time.Hour)
	in := human(targetKey)
	in.OccurredAt = &past
	f.append1(t0.Add(3*day), in)

	pol := awareness.RetentionPolicy{MaxAge: 36 * time.Hour}
	// now−36h = t0+1d+13h: only the event of t0 is old.
	now := t0.Add(2*day + time.Hour)
	if res := f.prune(pol, now); res.EventsDeleted != 1 {
		t.Errorf("first prune deleted %d, want 1", res.EventsDeleted)
	}
	st := f.stats()
	if st.LastPruneAt == nil || !st.LastPruneAt.Equal(now) {
		t.Errorf("LastPruneAt: got %v, want %v", st.LastPruneAt, now)
	}
	if st.OldestEvent == nil || !st.OldestEvent.Equal(t0.Add(day)) {
		t.Errorf("OldestEvent: got %v, want %v", st.OldestEvent, t0.Add(day))
	}
	// Age uses occurredAt: at exactly 36h after `past`, the backdated event is not yet
	// older than the limit; one nanosecond later it is.
	now = past.Add(36 * time.Hour)
	f.prune(pol, now)
	if got := seqs(f.read(r, 0, 10).Events); !slices.Equal(got, []int64{4}) {
		t.Errorf("retained at the boundary: got %v, want [4]", got)
	}
	f.prune(pol, now.Add(time.Nanosecond))
	ch := f.read(r, 0, 10)
	if len(ch.Events) != 0 || ch.Head.Version != 4 || ch.Head.PrunedThrough != 4 {
		t.Errorf("after pruning all: got events %v Version=%d PrunedThrough=%d, want none 4 4",
			seqs(ch.Events), ch.Head.Version, ch.Head.PrunedThrough)
	}
	if st := f.stats(); st.OldestEvent != nil {
		t.Errorf("OldestEvent with an empty log: got %v, want nil", st.OldestEvent)
	}
	// A zero policy prunes nothing but still records the run.
	if res := f.prune(awareness.RetentionPolicy{}, now.Add(day)); !cmp.Equal(res, awareness.PruneResult{}, emptyOK) {
		t.Errorf("zero policy: got %+v", res)
	}
}

func testHistoryGapBoundaries(t *testing.T, f *fixture) {
	r := ref(t, targetKey)
	f.append(t0, human(targetKey), human(targetKey), human(targetKey))
	f.append(t0.Add(2*time.Hour), human(targetKey), human(targetKey), human(targetKey))
	f.prune(awareness.RetentionPolicy{MaxAge: time.Hour}, t0.Add(2*time.Hour))
	const w = 3 // pruned watermark
	tests := []struct {
		after   int64
		gap     bool
		want    []int64
		wantErl int64
	}{
		{0, true, []int64{4, 5, 6}, 4},
		{w - 1, true, []int64{4, 5, 6}, 4},
		{w, false, []int64{4, 5, 6}, 4},
		{w + 1, false, []int64{5, 6}, 4},
		{6, false, nil, 4},
	}
	for _, tt := range tests {
		ch := f.read(r, tt.after, 200)
		if ch.Head.PrunedThrough != w {
			t.Fatalf("PrunedThrough: got %d, want %d", ch.Head.PrunedThrough, w)
		}
		if gap := tt.after < ch.Head.PrunedThrough; gap != tt.gap {
			t.Errorf("after %d: gap %v, want %v", tt.after, gap, tt.gap)
		}
		if diff := cmp.Diff(tt.want, seqs(ch.Events), emptyOK); diff != "" {
			t.Errorf("after %d: events (-want +got):\n%s", tt.after, diff)
		}
		if ch.Earliest != tt.wantErl {
			t.Errorf("after %d: Earliest %d, want %d", tt.after, ch.Earliest, tt.wantErl)
		}
	}
}

func testSessionsList(t *testing.T, f *fixture) {
	keys := []string{parentKey, childKey, targetKey, "cron:nightly", "cron:a_b", "cron:axb", "cron:a%b", "global"}
	for i, k := range keys {
		f.append1(t0.Add(time.Duration(i)*time.Minute), system(k, awareness.Compacted))
	}
	f.append1(t0.Add(time.Hour), system(parentKey, awareness.Compacted))
	f.append1(t0.Add(time.Hour), system(parentKey, awareness.RunCompleted))
	f.append1(t0, system(opsKey, awareness.RunCompleted))

	s, ok, err := f.s.Session(f.ctx, ref(t, parentKey))
	if err != nil || !ok {
		t.Fatalf("Session: %v %v", ok, err)
	}
	want := awareness.Session{
		Ref: ref(t, parentKey), Kind: awareness.KindMain, StateVersion: 3, CompactionCount: 2,
		CreatedAt: t0, UpdatedAt: t0.Add(time.Hour),
	}
	if diff := cmp.Diff(want, s, emptyOK); diff != "" {
		t.Errorf("Session (-want +got):\n%s", diff)
	}
	if _, ok, err := f.s.Session(f.ctx, ref(t, "agent:main:never")); ok || err != nil {
		t.Errorf("Session of unknown: got ok=%v err=%v, want false nil", ok, err)
	}

	list := func(q awareness.SessionQuery) []string {
		t.Helper()
		ss, err := f.s.ListSessions(f.ctx, q)
		if err != nil {
			t.Fatalf("ListSessions(%+v): %v", q, err)
		}
		var out []string
		for _, s := range ss {
			out = append(out, s.Ref.AgentID+"/"+s.Ref.Key)
		}
		return out
	}
	all := []string{"main/agent:main:direct:alice", "main/agent:main:main", "main/agent:main:subagent:c1",
		"main/cron:a%b", "main/cron:a_b", "main/cron:axb", "main/cron:nightly", "main/global", "ops/agent:ops:main"}
	sort.Strings(all)
	if diff := cmp.Diff(all, list(awareness.SessionQuery{})); diff != "" {
		t.Errorf("all (-want +got):\n%s", diff)
	}
	// Keyset pages of 2 walk the whole list exactly once.
	var paged []string
	q := awareness.SessionQuery{Limit: 2}
	for i := 0; i < 10; i++ {
		ss, err := f.s.ListSessions(f.ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range ss {
			paged = append(paged, s.Ref.AgentID+"/"+s.Ref.Key)
		}
		if len(ss) < 2 {
			break
		}
		last := ss[len(ss)-1].Ref
		q.After = &last
	}
	if diff := cmp.Diff(all, paged); diff != "" {
		t.Errorf("paged (-want +got):\n%s", diff)
	}
	tests := []struct {
		name string
		q    awareness.SessionQuery
		want []string
	}{
		{"agent", awareness.SessionQuery{AgentID: "ops"}, []string{"ops/agent:ops:main"}},
		{"kinds", awareness.SessionQuery{Kinds: []awareness.SessionKind{awareness.KindMain, awareness.KindGlobal}},
			[]string{"main/agent:main:main", "main/global", "ops/agent:ops:main"}},
		{"prefix is literal", awareness.SessionQuery{KeyPrefix: "cron:a_"}, []string{"main/cron:a_b"}},
		{"prefix percent", awareness.SessionQuery{KeyPrefix: "cron:a%"}, []string{"main/cron:a%b"}},
		{"prefix", awareness.SessionQuery{AgentID: "main", KeyPrefix: "cron:"},
			[]string{"main/cron:a%b", "main/cron:a_b", "main/cron:axb", "main/cron:nightly"}},
		{"updated since inclusive", awareness.SessionQuery{UpdatedSince: t0.Add(7 * time.Minute)},
			[]string{"main/agent:main:main", "main/global"}},
		{"after", awareness.SessionQuery{After: &awareness.SessionRef{AgentID: "main", Key: "global"}},
			[]string{"ops/agent:ops:main"}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, list(tt.q), emptyOK); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

func testCompositeIdentity(t *testing.T, f *fixture) {
	mainGlobal, opsGlobal := ref(t, "global"), ref(t, "global", "ops")
	if mainGlobal == opsGlobal {
		t.Fatalf("refs are equal: %v", mainGlobal)
	}
	f.watch(parentKey, opsGlobal, t0)
	inMain := awareness.RecordInput{SessionKey: "global", Kind: awareness.GoalChanged, ActorType: awareness.ActorHuman}
	inOps := inMain
	inOps.AgentID = ptr("ops")
	a := f.append(t0, inMain, inMain)
	if a[1].Version != 2 || len(a[0].Opened)+len(a[1].Opened) != 0 {
		t.Errorf("main/global: got version %d, opened %d, want 2 and none", a[1].Version, len(a[0].Opened)+len(a[1].Opened))
	}
	b := f.append1(t0.Add(time.Second), inOps)
	if b.Version != 1 {
		t.Errorf("ops/global: got version %d, want 1", b.Version)
	}
	if diff := cmp.Diff([]awareness.Notice{notice(parentKey, opsGlobal, 0, 1, 1, t0.Add(time.Second))}, b.Opened); diff != "" {
		t.Errorf("ops/global notices (-want +got):\n%s", diff)
	}
	if got := f.read(mainGlobal, 0, 10); got.Head.Version != 2 || len(got.Events) != 2 {
		t.Errorf("main/global: got version %d with %d events", got.Head.Version, len(got.Events))
	}
	// Targets are agent-qualified: acking main's global leaves ops's global alone.
	if res := f.ack(awareness.AckRequest{Watcher: parentKey, Targets: []awareness.SessionRef{mainGlobal}}, t0.Add(time.Minute)); len(res.Closed) != 0 {
		t.Errorf("ack of main/global closed %v", res.Closed)
	}
	if got := f.pending(parentKey); len(got) != 1 {
		t.Errorf("pending after acking another agent's global: %v, want ops/global's notice", got)
	}
	if res := f.ack(awareness.AckRequest{Watcher: parentKey, Targets: []awareness.SessionRef{opsGlobal}}, t0.Add(time.Minute)); len(res.Closed) != 1 {
		t.Errorf("ack of ops/global closed %v, want its notice", res.Closed)
	}
	if got := f.pending(parentKey); len(got) != 0 {
		t.Errorf("pending after ack: %v", got)
	}
	ok, _, err := deleteSession(f.ctx, f.s, mainGlobal, t0.Add(time.Hour))
	if err != nil || !ok {
		t.Fatalf("DeleteSession: %v %v", ok, err)
	}
	if _, ok, _ := f.s.Session(f.ctx, opsGlobal); !ok {
		t.Errorf("deleting main/global deleted ops/global")
	}
	if _, ok := f.cursor(parentKey, opsGlobal); !ok {
		t.Errorf("deleting main/global deleted the cursor on ops/global")
	}
}

func testChildSpawnedSeeds(t *testing.T, f *fixture) {
	child := ref(t, childKey)
	f.append1(t0, byAgent(childKey, awareness.GoalChanged, childKey)) // history before the spawn
	f.watch(opsKey, child, t0)                                        // another watcher, at 1
	spawn := f.append1(t0.Add(time.Second), byAgent(childKey, awareness.ChildSpawned, parentKey, parentKey))
	if spawn.Version != 2 || len(spawn.Opened) != 0 {
		t.Fatalf("spawn: got version %d, %d notices; want 2, none", spawn.Version, len(spawn.Opened))
	}
	want := awareness.Cursor{TargetGeneration: 1, WatcherGeneration: 1, Watcher: parentKey, Target: child, L: 2, N: 2, M: 2, UpdatedAt: t0.Add(time.Second)}
	if diff := cmp.Diff(want, f.mustCursor(parentKey, child)); diff != "" {
		t.Errorf("seeded cursor (-want +got):\n%s", diff)
	}
	wantOps := awareness.Cursor{TargetGeneration: 1, WatcherGeneration: 1, Watcher: opsKey, Target: child, L: 1, N: 1, M: 1, UpdatedAt: t0}
	if diff := cmp.Diff(wantOps, f.mustCursor(opsKey, child)); diff != "" {
		t.Errorf("child_spawned moved another watcher's cursor (-want +got):\n%s", diff)
	}
	if got := f.pending(""); len(got) != 0 {
		t.Errorf("pending after spawn: %v", got)
	}
	// The first notifying event notifies both, each from its own L.
	now := t0.Add(time.Minute)
	op := f.append1(now, human(childKey))
	wantN := []awareness.Notice{notice(opsKey, child, 1, 3, 3, now), notice(parentKey, child, 2, 3, 3, now)}
	sortNotices(op.Opened)
	sortNotices(wantN)
	if diff := cmp.Diff(wantN, op.Opened); diff != "" {
		t.Errorf("notices (-want +got):\n%s", diff)
	}
	// A repeated spawn never swallows a pending notice.
	before := f.mustCursor(parentKey, child)
	f.append1(now.Add(time.Second), byAgent(childKey, awareness.ChildSpawned, parentKey, parentKey))
	if diff := cmp.Diff(before, f.mustCursor(parentKey, child)); diff != "" {
		t.Errorf("repeated spawn changed a pending cursor (-want +got):\n%s", diff)
	}
}

func sortNotices(ns []awareness.Notice) {
	sort.Slice(ns, func(i, j int) bool { return ns[i].ID() < ns[j].ID() })
}

func testWatch(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	f.append(t0, human(targetKey), human(targetKey), human(targetKey))
	c, created, err := f.s.Watch(f.ctx, parentKey, target, "", t0.Add(time.Second))
	if err != nil || !created {
		t.Fatalf("Watch: created=%v err=%v", created, err)
	}
	want := awareness.Cursor{TargetGeneration: 1, WatcherGeneration: 1, Watcher: parentKey, Target: target, L: 3, N: 3, M: 3, UpdatedAt: t0.Add(time.Second)}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("Watch cursor (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, f.mustCursor(parentKey, target)); diff != "" {
		t.Errorf("stored cursor (-want +got):\n%s", diff)
	}
	// History before the watch never notifies; the next change does.
	f.append1(t0.Add(time.Minute), human(targetKey))
	pending := f.mustCursor(parentKey, target)
	if !pending.Pending() {
		t.Fatalf("cursor not pending after a change: %+v", pending)
	}
	c, created, err = f.s.Watch(f.ctx, parentKey, target, "", t0.Add(time.Hour))
	if err != nil || created {
		t.Fatalf("re-Watch: created=%v err=%v, want false nil", created, err)
	}
	if diff := cmp.Diff(pending, c); diff != "" {
		t.Errorf("re-Watch result (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(pending, f.mustCursor(parentKey, target)); diff != "" {
		t.Errorf("re-Watch changed state (-want +got):\n%s", diff)
	}
	// A target without a head is watched at 0.
	fresh := ref(t, "agent:main:subagent:fresh")
	if c := f.watch(parentKey, fresh, t0); c.L != 0 || c.N != 0 || c.M != 0 {
		t.Errorf("watch without head: got %+v, want zeros", c)
	}
	if ok, _, err := f.s.Unwatch(f.ctx, parentKey, fresh); !ok || err != nil {
		t.Errorf("Unwatch: got %v %v, want true nil", ok, err)
	}
	if ok, _, err := f.s.Unwatch(f.ctx, parentKey, fresh); ok || err != nil {
		t.Errorf("second Unwatch: got %v %v, want false nil", ok, err)
	}
	if _, ok := f.cursor(parentKey, target); !ok {
		t.Errorf("Unwatch removed another pair")
	}
}

func testProducerPassedWatcher(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	f.append(t0, system(targetKey, awareness.RunCompleted), system(targetKey, awareness.RunCompleted))
	now := t0.Add(time.Second)
	op := f.append1(now, human(targetKey, parentKey))
	if diff := cmp.Diff([]awareness.Notice{notice(parentKey, target, 0, 3, 3, now)}, op.Opened); diff != "" {
		t.Errorf("notices (-want +got):\n%s", diff)
	}
	want := awareness.Cursor{TargetGeneration: 1, WatcherGeneration: 1, Watcher: parentKey, Target: target, L: 0, N: 3, M: 3, OpenedAt: now, UpdatedAt: now}
	if diff := cmp.Diff(want, f.mustCursor(parentKey, target)); diff != "" {
		t.Errorf("cursor (-want +got):\n%s", diff)
	}
	// Passing the watcher again only moves M.
	op = f.append1(now.Add(time.Second), human(targetKey, parentKey))
	if len(op.Opened) != 0 {
		t.Errorf("second event opened %v", op.Opened)
	}
	if c := f.mustCursor(parentKey, target); c.L != 0 || c.N != 3 || c.M != 4 {
		t.Errorf("cursor: got L=%d N=%d M=%d, want 0 3 4", c.L, c.N, c.M)
	}
}

func testDeleteKeepsHead(t *testing.T, f *fixture) {
	child, target := ref(t, childKey), ref(t, targetKey)
	f.append(t0, human(childKey), human(childKey), human(childKey), human(childKey))
	f.append1(t0, human(targetKey))
	f.watch(parentKey, child, t0)  // a cursor on the deleted session
	f.watch(childKey, target, t0)  // a cursor the deleted session holds
	f.watch(parentKey, target, t0) // unrelated
	ok, _, err := deleteSession(f.ctx, f.s, child, t0.Add(time.Hour))
	if err != nil || !ok {
		t.Fatalf("DeleteSession: got %v %v, want true nil", ok, err)
	}
	if _, ok, err := f.s.Session(f.ctx, child); ok || err != nil {
		t.Errorf("Session after delete: ok=%v err=%v, want false nil", ok, err)
	}
	// The deleted event (LIF-1) is the head and the one event the log keeps.
	ch := f.read(child, 0, 10)
	if ch.Head.Version != 5 || ch.Head.PrunedThrough != 4 || !slices.Equal(seqs(ch.Events), []int64{5}) || ch.Earliest != 5 ||
		ch.Events[0].Kind != awareness.Deleted || ch.Events[0].ActorType != awareness.ActorSystem {
		t.Errorf("head after delete: got Version=%d PrunedThrough=%d Earliest=%d events=%v, want 5 4 5 [5: deleted]",
			ch.Head.Version, ch.Head.PrunedThrough, ch.Earliest, seqs(ch.Events))
	}
	// The cursor on the deleted session is retired with the deletion's notice pending
	// (LIF-1); acknowledging it removes the cursor.
	if c, ok := f.cursor(parentKey, child); !ok || !c.Retired || c.L != 4 || c.N != 5 {
		t.Errorf("cursor on the deleted session: got %+v %v, want retired, L 4, N 5", c, ok)
	}
	f.ack(awareness.AckRequest{Watcher: parentKey, Exact: []awareness.AckTarget{{Target: child, NotifiedVersion: 5}}}, t0.Add(time.Hour))
	if c, ok := f.cursor(parentKey, child); ok {
		t.Errorf("retired cursor survived its acknowledgement: %+v", c)
	}
	if _, ok := f.cursor(childKey, target); ok {
		t.Errorf("cursor held by the deleted session survived")
	}
	if _, ok := f.cursor(parentKey, target); !ok {
		t.Errorf("unrelated cursor was deleted")
	}
	for _, r := range []awareness.SessionRef{child, ref(t, "agent:main:never")} {
		if ok, _, err := deleteSession(f.ctx, f.s, r, t0.Add(2*time.Hour)); ok || err != nil {
			t.Errorf("DeleteSession(%v) again: got %v %v, want false nil", r.Key, ok, err)
		}
	}
	// A watcher that never logged anything has no session row, but deleting it still
	// deletes the cursors it holds.
	f.watch(child2Key, target, t0)
	if ok, _, err := deleteSession(f.ctx, f.s, ref(t, child2Key), t0.Add(2*time.Hour)); ok || err != nil {
		t.Errorf("DeleteSession(row-less watcher): got %v %v, want false nil", ok, err)
	}
	if _, ok := f.cursor(child2Key, target); ok {
		t.Errorf("cursor held by a row-less deleted watcher survived")
	}
	if _, ok, _ := f.s.Session(f.ctx, ref(t, child2Key)); ok {
		t.Errorf("deleting a row-less session created one")
	}
	ss, err := f.s.ListSessions(f.ctx, awareness.SessionQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if s.Ref == child {
			t.Errorf("ListSessions lists the deleted session")
		}
	}
	// A later append revives the session; the version continues.
	op := f.append1(t0.Add(3*time.Hour), human(childKey))
	if op.Version != 6 {
		t.Errorf("append after delete: version %d, want 6", op.Version)
	}
	s, ok, err := f.s.Session(f.ctx, child)
	if err != nil || !ok || s.StateVersion != 6 || s.PrunedThrough != 4 {
		t.Errorf("revived session: got %+v %v %v, want StateVersion 6 PrunedThrough 4", s, ok, err)
	}
	if got := seqs(f.read(child, 0, 10).Events); !slices.Equal(got, []int64{5, 6}) {
		t.Errorf("revived log: got %v, want [5 6]", got)
	}
}

func testResetAndExpiry(t *testing.T, f *fixture) {
	t1, t2 := ref(t, targetKey), ref(t, childKey)
	f.append(t0, human(targetKey), human(childKey))
	f.watch(parentKey, t1, t0)
	f.watch(parentKey, t2, t0)
	f.watch(opsKey, t1, t0)
	n, _, err := f.s.ResetWatcher(f.ctx, parentKey)
	if err != nil || n != 2 {
		t.Fatalf("ResetWatcher: got %d %v, want 2 nil", n, err)
	}
	if cs, _ := f.s.Cursors(f.ctx, awareness.CursorQuery{Watcher: parentKey}); len(cs) != 0 {
		t.Errorf("cursors after reset: %v", cs)
	}
	if _, ok := f.cursor(opsKey, t1); !ok {
		t.Errorf("reset deleted another watcher's cursor")
	}
	if ch := f.read(t1, 0, 10); ch.Head.Version != 1 || len(ch.Events) != 1 {
		t.Errorf("reset touched the target's history: %+v", ch)
	}
	if n, _, err := f.s.ResetWatcher(f.ctx, parentKey); n != 0 || err != nil {
		t.Errorf("second reset: got %d %v, want 0 nil", n, err)
	}

	// Expiry: the cursor touched at t0 expires, the one touched 20 days later stays.
	day := 24 * time.Hour
	f.watch(parentKey, t2, t0.Add(20*day))
	res := f.prune(awareness.RetentionPolicy{CursorTTL: 30 * day}, t0.Add(31*day))
	if res.CursorsExpired != 1 {
		t.Errorf("CursorsExpired: got %d, want 1", res.CursorsExpired)
	}
	cs, err := f.s.Cursors(f.ctx, awareness.CursorQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].Watcher != parentKey || cs[0].Target != t2 {
		t.Errorf("cursors after expiry: got %+v, want only (%s, %v)", cs, parentKey, t2)
	}
	// A notifying event touches the cursor and so keeps it alive.
	f.append1(t0.Add(40*day), human(childKey))
	if res := f.prune(awareness.RetentionPolicy{CursorTTL: 30 * day}, t0.Add(55*day)); res.CursorsExpired != 0 {
		t.Errorf("touched cursor expired")
	}
}

// testExpiryPeriod: cursor expiry, which reads every cursor, is skipped by a pass less
// than ExpireEvery after the last expiry (the database keeps when it ran, for every
// process sharing it), and runs again after that (WAT-5).
func testExpiryPeriod(t *testing.T, f *fixture) {
	day := 24 * time.Hour
	pol := awareness.RetentionPolicy{CursorTTL: 30 * day, ExpireEvery: 30 * time.Minute}
	f.watch(parentKey, ref(t, targetKey), t0)
	first := t0.Add(31 * day)
	if res := f.prune(pol, first); res.CursorsExpired != 1 || res.ExpirySkipped {
		t.Fatalf("first expiry: %+v, want 1 expired", res)
	}
	f.watch(parentKey, ref(t, childKey), t0) // expirable at once
	if res := f.prune(pol, first.Add(10*time.Minute)); res.CursorsExpired != 0 || !res.ExpirySkipped {
		t.Errorf("a pass 10 minutes after the last expiry: %+v, want expiry skipped", res)
	}
	if _, ok := f.cursor(parentKey, ref(t, childKey)); !ok {
		t.Error("a skipped expiry expired a cursor")
	}
	if res := f.prune(awareness.RetentionPolicy{CursorTTL: 30 * day}, first.Add(11*time.Minute)); res.CursorsExpired != 1 || res.ExpirySkipped {
		t.Errorf("a pass without ExpireEvery: %+v, want 1 expired", res)
	}
	f.watch(parentKey, ref(t, child2Key), t0)
	if res := f.prune(pol, first.Add(40*time.Minute)); res.CursorsExpired != 0 || !res.ExpirySkipped {
		t.Errorf("29 minutes after the last expiry: %+v, want it skipped", res)
	}
	if res := f.prune(pol, first.Add(42*time.Minute)); res.CursorsExpired != 1 || res.ExpirySkipped {
		t.Errorf("31 minutes after the last expiry: %+v, want 1 expired", res)
	}
}

func testOneNoticeForTwenty(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	f.append(t0, system(targetKey, awareness.GoalChanged), system(targetKey, awareness.GoalChanged))
	f.watch(parentKey, target, t0)
	var opened []awareness.Notice
	first := t0.Add(time.Second)
	for i := 0; i < 20; i++ {
		op := f.append1(first.Add(time.Duration(i)*time.Millisecond), human(targetKey))
		opened = append(opened, op.Opened...)
	}
	want := notice(parentKey, target, 2, 3, 3, first)
	if diff := cmp.Diff([]awareness.Notice{want}, opened); diff != "" {
		t.Fatalf("opened (-want +got):\n%s", diff)
	}
	pend := f.pending(parentKey)
	want.MaterialVersion = 22
	if diff := cmp.Diff([]awareness.Notice{want}, pend); diff != "" {
		t.Errorf("pending (-want +got):\n%s", diff)
	}
	if len(pend) == 1 && (pend[0].ID() != opened[0].ID() || pend[0].Text != opened[0].Text) {
		t.Errorf("pending notice identity changed: got %q, want %q", pend[0].ID(), opened[0].ID())
	}
	if got, wantText := opened[0].Text, `Session "agent:main:direct:alice" changed (other actor). Reconcile before acting: session_status sessionKey "agent:main:direct:alice" changesSince 2.`; got != wantText {
		t.Errorf("text: got %q, want %q", got, wantText)
	}
}

func testSelfSuppression(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	f.watch(parentKey, target, t0)
	before := f.mustCursor(parentKey, target)
	op := f.append1(t0.Add(time.Second), byAgent(targetKey, awareness.GoalChanged, parentKey))
	if len(op.Opened) != 0 {
		t.Errorf("own change opened %v", op.Opened)
	}
	if diff := cmp.Diff(before, f.mustCursor(parentKey, target)); diff != "" {
		t.Errorf("own change moved the cursor (-want +got):\n%s", diff)
	}
	// A producer-passed watcher that is the actor gets no cursor.
	op = f.append1(t0.Add(2*time.Second), byAgent(targetKey, awareness.GoalChanged, child2Key, child2Key))
	if _, ok := f.cursor(child2Key, target); ok {
		t.Errorf("actor got a cursor as producer-passed watcher")
	}
	if diff := cmp.Diff([]awareness.Notice{notice(parentKey, target, 0, 2, 2, t0.Add(2*time.Second))}, op.Opened); diff != "" {
		t.Errorf("another actor's change (-want +got):\n%s", diff)
	}
}

func testAckReopensOnce(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	f.watch(parentKey, target, t0)
	f.append1(t0.Add(time.Second), human(targetKey))
	f.append(t0.Add(2*time.Second), human(targetKey), human(targetKey))
	// Acking other targets, or none, changes nothing.
	for _, refs := range [][]awareness.SessionRef{{ref(t, childKey)}, {}, {ref(t, "agent:ops:direct:alice")}} {
		res, err := f.s.Ack(f.ctx, awareness.AckRequest{Watcher: parentKey, Targets: refs, Now: t0.Add(3 * time.Second)})
		if err != nil || len(res.Opened)+len(res.Closed) != 0 {
			t.Errorf("Ack(%v): got %+v %v, want nothing", refs, res, err)
		}
	}
	if c := f.mustCursor(parentKey, target); c.L != 0 || c.N != 1 || c.M != 3 {
		t.Fatalf("before ack: got L=%d N=%d M=%d, want 0 1 3", c.L, c.N, c.M)
	}
	ackAt := t0.Add(time.Minute)
	res := f.ack(awareness.AckRequest{Watcher: parentKey}, ackAt)
	want := []awareness.Notice{notice(parentKey, target, 1, 3, 3, ackAt)}
	if diff := cmp.Diff(want, res.Opened); diff != "" {
		t.Errorf("follow-up (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]awareness.Notice{awareness.ClosedNotice(notice(parentKey, target, 0, 1, 3, t0.Add(time.Second)))}, res.Closed); diff != "" {
		t.Errorf("closed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, f.pending(parentKey)); diff != "" {
		t.Errorf("pending after ack (-want +got):\n%s", diff)
	}
	if res := f.ack(awareness.AckRequest{Watcher: parentKey, Targets: []awareness.SessionRef{target}}, ackAt.Add(time.Minute)); len(res.Opened) != 0 || len(res.Closed) != 1 {
		t.Errorf("second ack: got %+v, want one closed, no follow-up", res)
	}
	synced := f.mustCursor(parentKey, target)
	if synced.L != 3 || synced.N != 3 || synced.M != 3 || !synced.OpenedAt.IsZero() {
		t.Errorf("after second ack: got %+v, want L=N=M=3, no opening time", synced)
	}
	if res := f.ack(awareness.AckRequest{Watcher: parentKey}, ackAt.Add(time.Hour)); len(res.Opened)+len(res.Closed) != 0 {
		t.Errorf("ack with nothing pending: got %+v", res)
	}
	if diff := cmp.Diff(synced, f.mustCursor(parentKey, target)); diff != "" {
		t.Errorf("ack with nothing pending changed the cursor (-want +got):\n%s", diff)
	}
}

func testLogOnlyKinds(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	f.watch(parentKey, target, t0)
	before := f.mustCursor(parentKey, target)
	for i, k := range []awareness.EventKind{awareness.RunCompleted, awareness.RunFailed, awareness.Compacted, awareness.Adopted} {
		in := system(targetKey, k)
		in.Watchers = []string{childKey}
		op := f.append1(t0.Add(time.Duration(i+1)*time.Second), in)
		if len(op.Opened) != 0 {
			t.Errorf("%s opened %v", k, op.Opened)
		}
	}
	if diff := cmp.Diff(before, f.mustCursor(parentKey, target)); diff != "" {
		t.Errorf("log-only kinds moved a cursor (-want +got):\n%s", diff)
	}
	if _, ok := f.cursor(childKey, target); ok {
		t.Errorf("log-only kind created a producer-passed cursor")
	}
}

// testSweep: the startup sweep leaves every pending notice exactly as it is (same N,
// text and opening time, so the same ID), opens nothing a committed write left behind,
// and an exact acknowledgement named before it still acknowledges after it (NTC-5).
func testSweep(t *testing.T, f *fixture) {
	target, other := ref(t, targetKey), ref(t, childKey)
	f.watch(parentKey, target, t0)
	f.watch(opsKey, other, t0)
	opened := t0.Add(time.Second)
	f.append1(opened, human(targetKey))                                   // the notice: N = 1
	f.append(opened.Add(time.Second), human(targetKey), human(targetKey)) // M = 3
	f.append1(opened, system(childKey, awareness.RunCompleted))           // synced watcher stays quiet
	before := f.pending("")
	want := []awareness.Notice{notice(parentKey, target, 0, 1, 3, opened)}
	if diff := cmp.Diff(want, before); diff != "" {
		t.Fatalf("pending before the sweep (-want +got):\n%s", diff)
	}

	for i, at := range []time.Time{t0.Add(time.Hour), t0.Add(2 * time.Hour)} {
		n, err := f.s.Sweep(f.ctx, at, func(ns []awareness.Notice) { t.Errorf("sweep %d opened %v", i, ns) })
		if err != nil || n != 0 {
			t.Fatalf("sweep %d: opened %d, %v; want 0, nil", i, n, err)
		}
		if diff := cmp.Diff(before, f.pending("")); diff != "" {
			t.Errorf("pending after sweep %d (-before +after):\n%s", i, diff)
		}
		if got := f.pending("")[0].ID(); got != before[0].ID() {
			t.Errorf("sweep %d changed the notice's ID: %q, was %q", i, got, before[0].ID())
		}
	}
	c := f.mustCursor(parentKey, target)
	if c.L != 0 || c.N != 1 || c.M != 3 || !c.OpenedAt.Equal(opened) {
		t.Errorf("swept cursor: got %+v, want L=0 N=1 M=3 opened %v", c, opened)
	}
	// The exact acknowledgement of the notice drained before the "restart" matches.
	res := f.ack(awareness.AckRequest{Watcher: parentKey, Exact: []awareness.AckTarget{{Target: target, NotifiedVersion: 1}}},
		t0.Add(3*time.Hour))
	if len(res.Closed) != 1 || len(res.Opened) != 1 || res.Opened[0].NotifiedVersion != 3 || res.Opened[0].ChangesSince != 1 {
		t.Errorf("exact ack after the sweep: %+v, want the notice closed and a follow-up 1..3", res)
	}
}

func testPendingOrder(t *testing.T, f *fixture) {
	a, b := ref(t, targetKey), ref(t, childKey)
	f.watch(parentKey, a, t0)
	f.watch(opsKey, a, t0)
	f.watch(parentKey, b, t0)
	t1, t2 := t0.Add(time.Second), t0.Add(2*time.Second)
	opB := f.append1(t1, human(childKey))
	opA := f.append1(t2, human(targetKey))
	// Ordered by opening time, then watcher key ("agent:main:main" < "agent:ops:main").
	want := []awareness.Notice{
		notice(parentKey, b, 0, 1, 1, t1),
		notice(parentKey, a, 0, 1, 1, t2),
		notice(opsKey, a, 0, 1, 1, t2),
	}
	if diff := cmp.Diff(want, f.pending("")); diff != "" {
		t.Errorf("Pending(\"\") (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want[:2], f.pending(parentKey)); diff != "" {
		t.Errorf("Pending(parent) (-want +got):\n%s", diff)
	}
	// Notices read back carry the identity the append published.
	published := append(append([]awareness.Notice{}, opB.Opened...), opA.Opened...)
	ids := map[string]bool{}
	for _, n := range f.pending("") {
		ids[n.ID()] = true
	}
	for _, n := range published {
		if !ids[n.ID()] {
			t.Errorf("published notice %q is not pending by the same ID", n.ID())
		}
	}
	if got := f.pending(opsKey); len(got) != 1 || !got[0].Wake {
		t.Errorf("Pending(ops): %+v", got)
	}
	if got := f.pending(childKey); len(got) != 0 {
		t.Errorf("Pending(child): %+v", got)
	}
}

func testBatchAtomic(t *testing.T, f *fixture) {
	a := ref(t, targetKey)
	f.watch(parentKey, a, t0)
	now := t0.Add(time.Second)
	dup := human(targetKey)
	dup.DedupeKey = ptr("x")
	dup2 := dup
	dup2.Summary = ptr("same dedupe key, other summary")
	ops := f.append(now, dup, system(childKey, awareness.GoalChanged), dup2, human(targetKey))

	type res struct {
		Key      string
		Version  int64
		Recorded bool
		Opened   int
	}
	var got []res
	for _, op := range ops {
		got = append(got, res{op.Event.Session.Key, op.Version, op.Recorded, len(op.Opened)})
	}
	want := []res{{targetKey, 1, true, 1}, {childKey, 1, true, 0}, {targetKey, 1, false, 0}, {targetKey, 2, true, 0}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("batch results (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(ops[0].Event, ops[2].Event); diff != "" {
		t.Errorf("in-batch dedupe did not return the first event (-want +got):\n%s", diff)
	}
	cur := f.mustCursor(parentKey, a)
	if cur.L != 0 || cur.N != 1 || cur.M != 2 {
		t.Errorf("cursor after batch: got L=%d N=%d M=%d, want 0 1 2", cur.L, cur.N, cur.M)
	}

	// A batch with a malformed op commits nothing and reports no results.
	fresh := "agent:main:subagent:fresh"
	bad := &awareness.AppendOp{Now: now, New: awareness.NewEvent{Event: awareness.Event{
		Session: a, Kind: "bogus", ActorType: awareness.ActorHuman, Summary: "x", OccurredAt: now, RecordedAt: now}}}
	batch := []*awareness.AppendOp{f.op(human(targetKey), now), f.op(human(fresh, parentKey), now), bad}
	err := f.s.Append(f.ctx, batch)
	if code := awareness.ErrorCode(err); code != awareness.EINVALID {
		t.Fatalf("bad batch: got code %q (%v), want %s", code, err, awareness.EINVALID)
	}
	for i, op := range batch[:2] {
		if op.Version != 0 || op.Recorded || len(op.Opened) != 0 || op.Event.Sequence != 0 {
			t.Errorf("op %d of a failed batch kept results: %+v", i, op)
		}
	}
	if v := f.read(a, 0, 10).Head.Version; v != 2 {
		t.Errorf("head after failed batch: got %d, want 2", v)
	}
	if _, ok, _ := f.s.Session(f.ctx, ref(t, fresh)); ok {
		t.Errorf("failed batch created a session")
	}
	if diff := cmp.Diff(cur, f.mustCursor(parentKey, a)); diff != "" {
		t.Errorf("failed batch moved a cursor (-want +got):\n%s", diff)
	}
	if _, ok := f.cursor(parentKey, ref(t, fresh)); ok {
		t.Errorf("failed batch created a cursor")
	}
	if err := f.s.Append(f.ctx, nil); err != nil {
		t.Errorf("empty Append: %v", err)
	}
}

func testStatsAndPing(t *testing.T, f *fixture) {
	if err := f.s.Ping(f.ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if diff := cmp.Diff(awareness.Stats{}, f.stats()); diff != "" {
		t.Errorf("empty stats (-want +got):\n%s", diff)
	}
	f.watch(parentKey, ref(t, targetKey), t0)
	f.watch(opsKey, ref(t, childKey), t0)
	f.append(t0.Add(time.Second), human(targetKey), human(targetKey), system(childKey, awareness.RunCompleted))
	f.append1(t0.Add(time.Second), system(opsKey, awareness.Compacted))
	if _, _, err := deleteSession(f.ctx, f.s, ref(t, opsKey), t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	oldest := t0.Add(time.Second)
	// Deleting ops also deleted the cursor it held; its deleted event stays (LIF-1).
	want := awareness.Stats{Sessions: 2, Events: 4, Cursors: 1, PendingNotices: 1, OldestEvent: &oldest}
	if diff := cmp.Diff(want, f.stats()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
}

// testReadStatus: ReadStatus is ReadChanges and Session in one read (REC-1), for a
// session that does not exist, one with a log and no entry, a page of it, and a
// deleted one (its head stays, Session says not found).
func testReadStatus(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	if ch, sess := f.status(target, 0, 10); ch.Head.Version != 0 || sess != nil {
		t.Errorf("unknown session: head %+v, session %+v", ch.Head, sess)
	}
	f.append(t0, human(targetKey), human(targetKey), system(targetKey, awareness.Compacted))
	ch, sess := f.status(target, 1, 1)
	if ch.Head.Version != 3 || seqs(ch.Events)[0] != 2 || !ch.More || sess == nil || sess.StateVersion != 3 || sess.CompactionCount != 1 {
		t.Errorf("session with a log: changes %+v, session %+v", ch, sess)
	}
	f.status(target, 3, 0)
	if _, _, err := deleteSession(f.ctx, f.s, target, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// The deleted event is the one the log keeps (LIF-1).
	if ch, sess := f.status(target, 0, 10); ch.Head.Version != 4 || ch.Head.PrunedThrough != 3 || sess != nil ||
		len(ch.Events) != 1 || ch.Events[0].Kind != awareness.Deleted {
		t.Errorf("deleted session: head %+v, session %+v", ch.Head, sess)
	}
}

// testReadStatusSnapshot: the head, the page and the session row of a ReadStatus come
// from one snapshot, whatever commits meanwhile: the row's version is the head's, and
// the page holds every event up to it.
func testReadStatusSnapshot(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	const appends = 40
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range appends {
			if err := f.s.Append(f.ctx, []*awareness.AppendOp{f.op(human(targetKey), t0.Add(time.Duration(i)*time.Millisecond))}); err != nil {
				t.Errorf("Append: %v", err)
				return
			}
		}
	}()
	// check returns what is wrong with one ReadStatus, "" when nothing is.
	check := func() string {
		ch, sess, err := f.s.ReadStatus(f.ctx, target, 0, appends)
		switch {
		case err != nil:
			return fmt.Sprintf("ReadStatus: %v", err)
		case ch.Head.Version == 0 && (sess != nil || len(ch.Events) != 0):
			return fmt.Sprintf("no head, but session %+v and %d events", sess, len(ch.Events))
		case ch.Head.Version == 0:
			return ""
		case sess == nil || sess.StateVersion != ch.Head.Version || !sess.UpdatedAt.Equal(ch.Head.UpdatedAt):
			return fmt.Sprintf("head %+v, session %+v: not one snapshot", ch.Head, sess)
		case int64(len(ch.Events)) != ch.Head.Version || ch.More:
			return fmt.Sprintf("head %d with %d events (more %v): not one snapshot", ch.Head.Version, len(ch.Events), ch.More)
		}
		return ""
	}
	var bad string
	for running := true; running && bad == ""; {
		select {
		case <-done:
			running = false
		default:
		}
		bad = check()
	}
	<-done // the writer ends before the test does
	if bad == "" {
		bad = check()
	}
	if bad != "" {
		t.Error(bad)
	}
}

func testClosed(t *testing.T, f *fixture) {
	if err := f.s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := f.s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	check := func(what string, err error) {
		t.Helper()
		if code := awareness.ErrorCode(err); code != awareness.EUNAVAILABLE {
			t.Errorf("%s after Close: got code %q (%v), want %s", what, code, err, awareness.EUNAVAILABLE)
		}
	}
	check("Ping", f.s.Ping(f.ctx))
	check("Append", f.s.Append(f.ctx, []*awareness.AppendOp{f.op(human(targetKey), t0)}))
	_, err := f.s.ReadChanges(f.ctx, ref(t, targetKey), 0, 10)
	check("ReadChanges", err)
	_, _, err = f.s.ReadStatus(f.ctx, ref(t, targetKey), 0, 10)
	check("ReadStatus", err)
	_, err = f.s.Pending(f.ctx, "")
	check("Pending", err)
}

// testAckExact: the exact form acknowledges a pair only while its pending notice is the
// one named (NTC-3). A stale name — the notice was acknowledged and a follow-up opened,
// or it was acknowledged and a new notice opened later — changes nothing.
func testAckExact(t *testing.T, f *fixture) {
	target, child := ref(t, targetKey), ref(t, childKey)
	f.watch(parentKey, target, t0)
	f.watch(parentKey, child, t0)
	f.append1(t0.Add(time.Second), human(targetKey)) // notice N=1 on target
	f.append1(t0.Add(time.Second), human(childKey))  // notice N=1 on child
	// The gateway drains {target N=1}; meanwhile the target moves on (M=2).
	f.append1(t0.Add(2*time.Second), human(targetKey))
	exact := func(refs ...awareness.AckTarget) awareness.AckResult {
		return f.ack(awareness.AckRequest{Watcher: parentKey, Exact: refs}, t0.Add(time.Minute))
	}
	// A version that is not the pending one, and a pair without a cursor: nothing.
	if res := exact(awareness.AckTarget{Target: target, NotifiedVersion: 2},
		awareness.AckTarget{Target: ref(t, child2Key), NotifiedVersion: 1}); len(res.Closed)+len(res.Opened) != 0 {
		t.Errorf("ack of a notice that is not pending: %+v", res)
	}
	res := exact(awareness.AckTarget{Target: target, NotifiedVersion: 1})
	wantClosed := []awareness.Notice{awareness.ClosedNotice(notice(parentKey, target, 0, 1, 2, t0.Add(time.Second)))}
	wantOpened := []awareness.Notice{notice(parentKey, target, 1, 2, 2, t0.Add(time.Minute))}
	if diff := cmp.Diff(awareness.AckResult{Closed: wantClosed, Opened: wantOpened}, res, ignoreAcks); diff != "" {
		t.Errorf("exact ack (-want +got):\n%s", diff)
	}
	// The child's notice was not named: still pending, untouched.
	if c := f.mustCursor(parentKey, child); c.L != 0 || c.N != 1 {
		t.Errorf("unnamed pair changed: %+v", c)
	}
	// A retry of the same ack must not swallow the follow-up (N=2 now).
	if res := exact(awareness.AckTarget{Target: target, NotifiedVersion: 1}); len(res.Closed)+len(res.Opened) != 0 {
		t.Errorf("repeated exact ack acknowledged the follow-up: %+v", res)
	}
	if c := f.mustCursor(parentKey, target); c.L != 1 || c.N != 2 || c.M != 2 {
		t.Errorf("after the repeated ack: got L=%d N=%d M=%d, want 1 2 2", c.L, c.N, c.M)
	}
	// Drain both at once, exactly.
	res = exact(awareness.AckTarget{Target: target, NotifiedVersion: 2}, awareness.AckTarget{Target: child, NotifiedVersion: 1})
	if len(res.Closed) != 2 || len(res.Opened) != 0 || len(f.pending(parentKey)) != 0 {
		t.Errorf("exact ack of both: %+v, pending %v", res, f.pending(parentKey))
	}
	// A notice opened after the drain (N=3) is never acknowledged by the drain's name.
	f.append1(t0.Add(2*time.Minute), human(targetKey))
	if res := exact(awareness.AckTarget{Target: target, NotifiedVersion: 2}); len(res.Closed) != 0 {
		t.Errorf("a stale name acknowledged the new notice: %+v", res)
	}
	if got := f.pending(parentKey); len(got) != 1 || got[0].NotifiedVersion != 3 {
		t.Errorf("pending: %v, want the notice N=3", got)
	}
	if res := f.ack(awareness.AckRequest{Watcher: parentKey, Exact: []awareness.AckTarget{}}, t0.Add(time.Hour)); len(res.Closed) != 0 {
		t.Errorf("an empty exact list acknowledged %v", res.Closed)
	}
}

// testAckTargetsPerAgent: bare targets of two agents are two pairs; acknowledging one
// (targets or exact form) leaves the other's notice alone (KEY-3, NTC-3).
func testAckTargetsPerAgent(t *testing.T, f *fixture) {
	mainG, workerG := ref(t, "global"), ref(t, "global", "worker")
	f.watch(parentKey, mainG, t0)
	f.watch(parentKey, workerG, t0)
	inMain := awareness.RecordInput{SessionKey: "global", Kind: awareness.GoalChanged, ActorType: awareness.ActorHuman}
	inWorker := inMain
	inWorker.AgentID = ptr("worker")
	a := f.append(t0.Add(time.Second), inMain, inWorker)
	if len(a[0].Opened) != 1 || len(a[1].Opened) != 1 {
		t.Fatalf("opened %v and %v, want one each", a[0].Opened, a[1].Opened)
	}
	wantText := `Session "global" changed (other actor). Reconcile before acting: session_status sessionKey "global" agentId "worker" changesSince 0.`
	if got := a[1].Opened[0].Text; got != wantText {
		t.Errorf("NTC-1 text of worker's global:\n got %q\nwant %q", got, wantText)
	}
	res := f.ack(awareness.AckRequest{Watcher: parentKey, Exact: []awareness.AckTarget{{Target: workerG, NotifiedVersion: 1}}}, t0.Add(time.Minute))
	if len(res.Closed) != 1 || res.Closed[0].Target != workerG {
		t.Errorf("exact ack of worker's global closed %+v", res.Closed)
	}
	if got := f.pending(parentKey); len(got) != 1 || got[0].Target != mainG {
		t.Errorf("pending: %+v, want main's global only", got)
	}
	if cs, err := f.s.Cursors(f.ctx, awareness.CursorQuery{TargetKey: "global", TargetAgent: "worker"}); err != nil || len(cs) != 1 || cs[0].Target != workerG {
		t.Errorf("cursors on worker's global: %+v %v", cs, err)
	}
}

// testRemovalsCloseNotices: unwatch, reset, delete and expiry return the pending notices
// of the cursors they remove (closed), and nothing for synced cursors.
func testRemovalsCloseNotices(t *testing.T, f *fixture) {
	day := 24 * time.Hour
	target, child, child2 := ref(t, targetKey), ref(t, childKey), ref(t, child2Key)
	for _, r := range []awareness.SessionRef{target, child, child2} {
		f.watch(parentKey, r, t0)
		f.watch(opsKey, r, t0)
	}
	f.append(t0.Add(time.Second), human(targetKey), human(childKey), human(child2Key))
	f.watch("agent:main:subagent:synced", target, t0.Add(time.Second)) // synced: nothing to close
	closedOf := func(w string, r awareness.SessionRef, n int64) awareness.Notice {
		return awareness.ClosedNotice(notice(w, r, 0, n, n, t0.Add(time.Second)))
	}
	ok, closed, err := f.s.Unwatch(f.ctx, parentKey, target)
	if err != nil || !ok {
		t.Fatalf("Unwatch: %v %v", ok, err)
	}
	if diff := cmp.Diff([]awareness.Notice{closedOf(parentKey, target, 1)}, closed); diff != "" {
		t.Errorf("Unwatch closed (-want +got):\n%s", diff)
	}
	if _, closed, _ := f.s.Unwatch(f.ctx, "agent:main:subagent:synced", target); len(closed) != 0 {
		t.Errorf("Unwatch of a synced cursor closed %v", closed)
	}
	n, closed, err := f.s.ResetWatcher(f.ctx, parentKey)
	if err != nil || n != 2 {
		t.Fatalf("ResetWatcher: %d %v", n, err)
	}
	if diff := cmp.Diff([]awareness.Notice{closedOf(parentKey, child, 1), closedOf(parentKey, child2, 1)}, closed); diff != "" {
		t.Errorf("ResetWatcher closed (-want +got):\n%s", diff)
	}
	_, closed, err = deleteSession(f.ctx, f.s, child, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// ops's notice on child was pending: the deletion moved its M and retired it
	// (LIF-1), nothing closed.
	if len(closed) != 0 {
		t.Errorf("DeleteSession closed %v, want none", closed)
	}
	retired := awareness.ClosedNotice(notice(opsKey, child, 0, 1, 2, t0.Add(time.Second)))
	res := f.prune(awareness.RetentionPolicy{CursorTTL: 30 * day}, t0.Add(31*day))
	wantPruned := []awareness.Notice{closedOf(opsKey, target, 1), closedOf(opsKey, child2, 1), retired}
	sortNotices(wantPruned)
	sortNotices(res.Closed)
	if diff := cmp.Diff(wantPruned, res.Closed); diff != "" {
		t.Errorf("Prune closed (-want +got):\n%s", diff)
	}
	if got := f.pending(""); len(got) != 0 {
		t.Errorf("pending after every removal: %v", got)
	}
}

// testSetBasedOpen checks that a notifying append to a target with many cursors in
// every state (synced, pending, pending with newer changes, the actor itself, ahead of
// the event) plus producer-passed watchers (one already holding a cursor, new ones,
// one passed twice) leaves each cursor exactly as
// awareness.ApplyMaterial applied to it one by one would, and reports the notices in
// that order: the target's cursors by watcher key, then the new producer-passed ones.
func testSetBasedOpen(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	actor := "agent:main:subagent:actor"
	var watchers []string
	for i := range 60 {
		watchers = append(watchers, fmt.Sprintf("agent:w%02d:main", (i*37)%60))
	}
	watchers = append(watchers, actor)
	now := t0
	f.append1(now, system(targetKey, awareness.RunCompleted))
	for _, w := range watchers {
		f.watch(w, target, now)
	}
	// A third of the watchers end synced, the others pending (some with newer changes,
	// some with a follow-up opened by an acknowledgement); the actor's cursor is pending.
	now = now.Add(time.Second)
	f.append1(now, human(targetKey))
	for i, w := range watchers[:60] {
		if i%3 != 0 {
			if _, err := f.s.Ack(f.ctx, awareness.AckRequest{Watcher: w, Targets: []awareness.SessionRef{target}, Now: now}); err != nil {
				t.Fatal(err)
			}
		}
	}
	now = now.Add(time.Second)
	f.append1(now, byAgent(targetKey, awareness.GoalChanged, watchers[0]))
	for i, w := range watchers[:60] {
		if i%3 == 1 || i%6 == 3 {
			if _, err := f.s.Ack(f.ctx, awareness.AckRequest{Watcher: w, Targets: []awareness.SessionRef{target}, Now: now}); err != nil {
				t.Fatal(err)
			}
		}
	}
	before, err := f.s.Cursors(f.ctx, awareness.CursorQuery{TargetAgent: target.AgentID, TargetKey: target.Key})
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != len(watchers) {
		t.Fatalf("%d cursors on the target, want %d", len(before), len(watchers))
	}
	passed := []string{watchers[5], "agent:new:main", "agent:new:subagent:x", "agent:new:main"}

	now = now.Add(time.Second)
	op := f.append1(now, byAgent(targetKey, awareness.GoalChanged, actor, passed...))
	s := op.Event.Sequence

	// The per-cursor reference.
	want := map[string]awareness.Cursor{}
	var wantOpened []string
	sorted := slices.Clone(before)
	slices.SortFunc(sorted, func(a, b awareness.Cursor) int { return strings.Compare(a.Watcher, b.Watcher) })
	for _, c := range sorted {
		next, _, opened := awareness.ApplyMaterial(&c, c.Watcher, target, s, actor, now)
		want[c.Watcher] = next
		if opened {
			wantOpened = append(wantOpened, c.Watcher)
		}
	}
	for _, w := range passed {
		if _, ok := want[w]; ok {
			continue
		}
		next, _, opened := awareness.ApplyMaterial(nil, w, target, s, actor, now)
		next.TargetGeneration, next.WatcherGeneration = 1, 1 // a store's new cursor (LIF-2)
		want[w] = next
		if opened {
			wantOpened = append(wantOpened, w)
		}
	}
	after, err := f.s.Cursors(f.ctx, awareness.CursorQuery{TargetAgent: target.AgentID, TargetKey: target.Key})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]awareness.Cursor{}
	for _, c := range after {
		got[c.Watcher] = c
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cursors after the append (-per-cursor ApplyMaterial +store):\n%s", diff)
	}
	var gotOpened []string
	for _, n := range op.Opened {
		gotOpened = append(gotOpened, n.Watcher)
		if wn, ok := awareness.NoticeOf(want[n.Watcher]); !ok || !cmp.Equal(wn, n) {
			t.Errorf("opened notice %+v, want %+v", n, wn)
		}
	}
	if diff := cmp.Diff(wantOpened, gotOpened); diff != "" {
		t.Errorf("opened notices, by watcher (-want +got):\n%s", diff)
	}
	if len(wantOpened) < 20 {
		t.Fatalf("the fixture opened only %d notices", len(wantOpened))
	}
}
