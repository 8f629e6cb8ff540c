// Package storetest is the conformance suite of awareness.Store: every backend (SQLite,
// PostgreSQL and the core's in-memory test store) runs the same behaviours through Run.
//
// Subtests are named after the requirement ids of SPEC.md. The suite only uses the Store
// interface and builds its events through awareness.ValidateRecord, so it makes no
// assumption about the database behind it.
package storetest

import (
	"context"
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
