package awareness

import (
	"context"
	"encoding/json"
	"time"
)

// Head is a session's durable version header (SIG-3, SIG-6). It survives pruning and
// deletion, so versions are never reused and never go backwards.
type Head struct {
	Session SessionRef
	// Version is the stateVersion: the highest sequence ever recorded.
	Version int64
	// PrunedThrough is the pruned watermark: the highest sequence retention or deletion
	// removed. changesSince < PrunedThrough has a history gap (REC-2).
	PrunedThrough int64
	UpdatedAt     time.Time
	// Generation is the session's incarnation (LIF-2): 1, one more per reset; 1 for a
	// session without a head.
	Generation int64
}

// AppendOp is one append inside a write transaction, possibly shared, built by
// NewAppendOp. The store fills the result fields. Ops of one call are applied in
// order, so a later op sees the effects of earlier ones: the group commit relies on it.
type AppendOp struct {
	New NewEvent
	Now time.Time
	// Compactions is what the store adds to the session's compaction count when it
	// records the event, not when it deduplicates it: 1 for a compacted event, else 0
	// (REG-3).
	Compactions int64

	// Results.
	Event    Event    // the stored event; the first one when deduplicated (SIG-4)
	Recorded bool     // false when deduplicated
	Version  int64    // the session's head after this op
	Opened   []Notice // notices opened by this append, to publish after commit
	// Closed are the pending notices a lifecycle event closed, with Closed set: a
	// reset's on the session's targets and watchers (LIF-2), a deletion's on the
	// cursors it held. Published after commit, before Opened.
	Closed []Notice
}

// NewAppendOp returns the op that appends ne at now, with the registry effects of its
// kind decided.
func NewAppendOp(ne NewEvent, now time.Time) *AppendOp {
	return &AppendOp{New: ne, Now: now, Compactions: compactionsOf(ne.Event.Kind)}
}

// compactionsOf is how much recording an event of kind k adds to its session's
// compaction count (REG-3).
func compactionsOf(k EventKind) int64 {
	if k.CountsCompaction() {
		return 1
	}
	return 0
}

// LifecycleOp is the op that records a lifecycle event of kind k (LIF-1) on ref at now,
// by the system, with its canonical summary: what resetSession and deleteSession
// record.
func LifecycleOp(ref SessionRef, k EventKind, now time.Time) (*AppendOp, error) {
	agent := ref.AgentID
	ne, err := ValidateRecord(RecordInput{SessionKey: ref.Key, AgentID: &agent, Kind: k, ActorType: ActorSystem}, now)
	if err != nil {
		return nil, err
	}
	return NewAppendOp(ne, now), nil
}

// CheckAppendOps refuses, with INVALID_ARGUMENT, a batch with an op that
// ValidateRecord and NewAppendOp could not have produced: nil, an unknown kind, actor
// type or session kind, an empty session, zero times, a compaction count that is not
// the kind's. A store checks the batch before it writes anything.
func CheckAppendOps(ops []*AppendOp) error {
	for i, op := range ops {
		bad := func(format string, args ...any) error {
			return Errorf(EINVALID, "append op %d: "+format, append([]any{i}, args...)...)
		}
		if op == nil {
			return bad("op is nil")
		}
		ev := op.New.Event
		switch {
		case op.Now.IsZero():
			return bad("Now is zero")
		case ev.Session.AgentID == "" || ev.Session.Key == "":
			return bad("session is empty")
		case !ev.Kind.Valid():
			return bad("kind %q is not an event kind", ev.Kind)
		case !ev.ActorType.Valid():
			return bad("actorType %q is not an actor type", ev.ActorType)
		case ev.OccurredAt.IsZero():
			return bad("occurredAt is zero")
		case !op.New.SessionKind.Valid():
			return bad("session kind %q is not a session kind", op.New.SessionKind)
		case op.Compactions != compactionsOf(ev.Kind):
			return bad("compactions %d is not what a %s event counts", op.Compactions, ev.Kind)
		}
	}
	return nil
}

// CheckClock refuses with INTERNAL a zero time from the service clock: every store
// method given a time checks it before it writes.
func CheckClock(what string, now time.Time) error {
	if now.IsZero() {
		return Errorf(EINTERNAL, "%s: the service clock gave a zero time", what)
	}
	return nil
}

// Changes is one consistent read of a session's log for reconciliation (REC-1).
type Changes struct {
	Head Head
	// Events with sequence > after, ascending, at most limit.
	Events []Event
	// More is true when events beyond the page exist.
	More bool
	// Earliest is the lowest retained sequence of the session; when nothing is
	// retained, Head.PrunedThrough+1, where the next append lands.
	Earliest int64
}

// SessionEntry holds the registry fields of a session (REG-1). Nil fields are
// unknown, and an upsert leaves them unchanged.
type SessionEntry struct {
	SessionID                  *string
	ParentSessionKey           *string
	ChatType                   *string
	Provider                   *string
	DisplayName                *string
	InputTokens                *int64
	OutputTokens               *int64
	TotalTokens                *int64
	ContextTokens              *int64
	MemoryFlushAt              *time.Time
	MemoryFlushCompactionCount *int64
	// Extra holds every other SessionEntry field, kept as given (REG-2).
	Extra map[string]json.RawMessage
}

// Session is a row of the sessions list: a head and/or a registry entry.
type Session struct {
	Ref  SessionRef
	Kind SessionKind
	// StateVersion is 0 when the session never logged a change (REC-5).
	StateVersion    int64
	PrunedThrough   int64
	CompactionCount int64
	Registered      bool
	Entry           SessionEntry
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

// SessionQuery selects sessions for sessionsList, ordered by agentId, then key.
type SessionQuery struct {
	AgentID      string
	Kinds        []SessionKind
	UpdatedSince time.Time // zero: no bound
	KeyPrefix    string
	After        *SessionRef // keyset cursor: rows strictly after this one
	Limit        int
}

// CursorQuery selects cursors by watcher and/or target. Empty fields match all.
type CursorQuery struct {
	Watcher     string
	TargetKey   string
	TargetAgent string
}

// AckTarget names one notice a watcher drained, exactly (NTC-3): the pair's target and
// the notice's NotifiedVersion.
type AckTarget struct {
	Target          SessionRef
	NotifiedVersion int64
	// WatcherGeneration is the watcher's generation the notice was drained in (LIF-2);
	// 0 when the acknowledgement does not name one.
	WatcherGeneration int64
}

// CheckAckGeneration refuses an exact acknowledgement naming a generation of the
// watcher other than its current one, gen (LIF-2): an earlier one is STALE_GENERATION,
// since notices drained by a previous incarnation are never acknowledged for the new
// one; a later one is INVALID_ARGUMENT. A store checks it inside the acknowledgement's
// transaction, before it writes anything.
func CheckAckGeneration(exact []AckTarget, gen int64) error {
	for i, e := range exact {
		switch {
		case e.WatcherGeneration == 0 || e.WatcherGeneration == gen:
		case e.WatcherGeneration < gen:
			return Errorf(ESTALEGENERATION, "notices[%d]: watcherGeneration %d is an earlier generation of the watcher, now at %d; nothing was acknowledged", i, e.WatcherGeneration, gen)
		default:
			return Errorf(EINVALID, "notices[%d]: watcherGeneration %d is above the watcher's generation %d", i, e.WatcherGeneration, gen)
		}
	}
	return nil
}

// AckRequest is what Store.Ack acknowledges for one watcher. Exactly one form applies:
//
//   - Exact, when non-nil: each named notice, only while its pair's pending notice is
//     still that one (AckNamed); a pair whose notice changed since the drain is left.
//   - Targets, when non-nil: every pending notice on these targets, whatever it is now
//     (AckCursor). Racy for a remote gateway: a notice opened after its prompt was
//     built is acknowledged unseen.
//   - neither: every pending notice of the watcher, racy likewise.
//
// An empty non-nil slice acknowledges nothing.
type AckRequest struct {
	Watcher string
	Targets []SessionRef
	Exact   []AckTarget
	Now     time.Time
	// By is who acknowledges, kept in the acknowledgement history: AckRecords.
	By AckClient
}

// AckResult is what an Ack did: the notices it closed, as they were with Closed set,
// and the follow-ups it opened, both ordered by target agent, then key. The service
// publishes Closed before Opened, after the commit. With the exact form, Acks says
// what became of each named notice, in the order named (AckNamed).
type AckResult struct {
	Closed []Notice
	Opened []Notice
	Acks   []NoticeAck
}

// SweepPage bounds the cursors one transaction of Store.Sweep reads and writes.
const SweepPage = 500

// RetentionPolicy is the pruning configuration (SIG-6, WAT-5); MaxAge and MaxRows
// bound the acknowledgement history too.
type RetentionPolicy struct {
	MaxAge  time.Duration // events older than this are pruned; 0 disables
	MaxRows int           // the log keeps at most this many rows in all; 0 disables
	// CursorTTL expires cursors untouched for this long; 0 disables.
	CursorTTL time.Duration
	// ExpireEvery skips cursor expiry, which reads every cursor, when any process
	// sharing the database ran it less than this long ago; 0 runs it on every pass.
	ExpireEvery time.Duration
}

// PruneResult reports one pruning pass.
type PruneResult struct {
	EventsDeleted int64
	// AcksDeleted counts the acknowledgement records pruned.
	AcksDeleted     int64
	CursorsExpired  int64
	SessionsStamped int64
	// ExpirySkipped is true when cursor expiry was due by CursorTTL but skipped
	// because it ran less than ExpireEvery ago.
	ExpirySkipped bool
	// Closed are the pending notices of the expired cursors, with Closed set, for the
	// caller to publish after the commit.
	Closed []Notice
}

// Stats summarises the database for the status command and /readyz.
type Stats struct {
	Sessions       int64
	Events         int64
	Cursors        int64
	PendingNotices int64
	OldestEvent    *time.Time
	LastPruneAt    *time.Time
}

// Store is the durable state behind the service: the signal log, heads, cursors and
// the registry. internal/models implements it for SQLite and PostgreSQL, checked by
// one conformance suite, internal/models/storetest.
//
// Every method that writes does so in one transaction, and every state transition of
// a cursor uses the pure functions of this package: SeedCursor, ApplyMaterial,
// AckCursor, AckNamed, SweepCursor, WatchCursor, ResetCursor. Errors are *Error
// values: storage failures map to UNAVAILABLE or INTERNAL, never leaking SQL or paths.
type Store interface {
	// Append applies ops in one write transaction, in order (SIG-3, SIG-4, NTC-2). For
	// each op it assigns the next dense sequence under the session's head row, or returns
	// the existing event for a known dedupe key; seeds cursors for child_spawned; applies
	// notifying events to every cursor on the target that selects their kind (LIF-3) and
	// to producer-passed watchers; applies a reset: a new generation, ResetCursor over
	// the cursors on the session, the cursors it holds deleted (LIF-2); and, after a
	// deleted event notified, retires the cursors on the session and deletes the rest of
	// it (LIF-1). Either every op commits or none does.
	Append(ctx context.Context, ops []*AppendOp) error

	// ReadChanges returns the head and up to limit events after `after`, in one read
	// transaction. A session without a head has Version 0.
	ReadChanges(ctx context.Context, ref SessionRef, after int64, limit int) (Changes, error)
	// ReadStatus is ReadChanges and Session read from one snapshot for sessionStatus
	// (REC-1): sess is nil when Session would answer ok false.
	ReadStatus(ctx context.Context, ref SessionRef, after int64, limit int) (ch Changes, sess *Session, err error)

	// Session returns one session row; ok is false when neither a head nor a registry
	// entry exists, or the session was deleted.
	Session(ctx context.Context, ref SessionRef) (s Session, ok bool, err error)
	// ListSessions returns up to q.Limit sessions after q.After, by agentId and key.
	ListSessions(ctx context.Context, q SessionQuery) ([]Session, error)
	// DeleteSession records a deleted event on a live session (LIF-1) through the
	// Append path: the event notifies every watcher of the session once, their cursors
	// are retired, and the session's earlier events, the cursors it holds, its upstream
	// link, registry entry and acknowledgement records as watcher or target are
	// deleted; the head stays with PrunedThrough just below the deleted event. op is
	// that append, whose Event, Opened and Closed are published after the commit. op is
	// nil when the session did not exist or was deleted: then only the cursors in both
	// directions are deleted, closed holding their pending notices with Closed set.
	DeleteSession(ctx context.Context, ref SessionRef, now time.Time) (op *AppendOp, closed []Notice, err error)
	// Watch registers watcher on target at the target's current version (WAT-3),
	// selecting kinds, "" for the default (LIF-3). An existing cursor keeps its
	// watermarks; kinds other than "" replace its selection.
	Watch(ctx context.Context, watcher string, target SessionRef, kinds KindSelection, now time.Time) (c Cursor, created bool, err error)
	// Unwatch removes one cursor; ok is false when there was none. closed holds its
	// pending notice, if any, with Closed set.
	Unwatch(ctx context.Context, watcher string, target SessionRef) (ok bool, closed []Notice, err error)
	// Ack acknowledges the watcher's pending notices as req says (NTC-3) and returns
	// the notices it closed and the follow-ups it opened. In the same transaction it
	// adds AckRecords(req, result) to the acknowledgement history.
	Ack(ctx context.Context, req AckRequest) (AckResult, error)
	// AckHistory returns the acknowledgement records q selects, highest ID first, at
	// most q.Limit.
	AckHistory(ctx context.Context, q AckHistoryQuery) ([]AckRecord, error)
	// Spawns returns, for every session of agentID, or of every agent for "", whose
	// earliest retained child_spawned event names an agent-qualified actor, that actor:
	// the session's parent. Ordered by agent, then key.
	Spawns(ctx context.Context, agentID string) ([]Spawn, error)
	// Cursors lists cursors, ordered by watcher, target agent, target key.
	Cursors(ctx context.Context, q CursorQuery) ([]Cursor, error)
	// Pending lists pending notices of one watcher, or of every watcher when watcher is "".
	Pending(ctx context.Context, watcher string) ([]Notice, error)
	// ResetWatcher deletes every cursor the watcher holds (WAT-5); n is how many, and
	// closed their pending notices, with Closed set.
	ResetWatcher(ctx context.Context, watcher string) (n int64, closed []Notice, err error)
	// Sweep is the startup sweep (NTC-5): it opens the notice of every cursor with
	// M > N == L by SweepCursor, found through an index in pages of at most SweepPage
	// cursors, each page in a write transaction of its own that locks only that
	// page's rows, and calls opened with each page's notices after its commit. It
	// reads and writes no pending cursor. It returns how many notices it opened.
	Sweep(ctx context.Context, now time.Time, opened func([]Notice)) (int, error)

	// Prune applies retention (SIG-6) and cursor expiry (WAT-5) in one transaction,
	// stamping pruned watermarks before deleting. Heads are never lowered. The
	// acknowledgement history is pruned by the same rules: records acknowledged
	// before now−MaxAge, and the oldest beyond MaxRows records.
	Prune(ctx context.Context, p RetentionPolicy, now time.Time) (PruneResult, error)

	// Digests returns the digest of each range (DIG-1), in their order, in one read
	// transaction: each range is one indexed read of its target's log, the events
	// after After up to Through grouped by kind and actor type, and the latest human
	// event's channel. A range CheckDigestRanges refuses is INVALID_ARGUMENT, nothing read.
	Digests(ctx context.Context, ranges []DigestRange) ([]NoticeDigest, error)

	// Stats summarises the database.
	Stats(ctx context.Context) (Stats, error)
	// Activity counts the events selected by q per minute of occurredAt and per kind,
	// ordered by minute, then kind; minutes without an event have no bucket.
	Activity(ctx context.Context, q ActivityQuery) ([]ActivityBucket, error)
	// Ping checks that the database answers and its migrations are applied.
	Ping(ctx context.Context) error
	// Close releases the database.
	Close() error
}

// Spawn is a session's parent as its child_spawned event names it.
type Spawn struct {
	Child  SessionRef
	Parent string // the agent-qualified key of the acting session
}
