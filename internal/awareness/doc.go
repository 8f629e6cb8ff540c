// Package awareness is the domain core of the session state awareness service: session
// keys, the signal log, watchers' cursors and their stale notices, reconciliation, the
// session registry, the in-process notice hub, and the Service that the GraphQL
// resolvers and the command line call; MCP goes through GraphQL. It imports the
// standard library only: storage is behind the Store interface, implemented by
// internal/models, and transports map its *Error codes (ERR-1).
//
// # The log and its versions
//
// A session is named by its agent id and key (KEY-1..4). Each session has an
// append-only signal log of events (SIG-1, SIG-2). ValidateRecord checks an append
// before the store is touched (KEY-4, SIG-2, SIG-5), so a refused call writes nothing
// (ERR-2). Sequences are per session, dense and strictly increasing, assigned by the
// store inside the append transaction under the session's head row, never by a global
// counter (SIG-3): on PostgreSQL, sequence order is not commit order. The Head keeps
// the state version, the highest sequence ever recorded, and the pruned watermark, and
// it survives pruning and deletion, so a version is never reused and never goes
// backwards. A dedupe key makes an append idempotent (SIG-4). Service.SessionStatus
// reads the head and the page of events after changesSince in one read transaction,
// Store.ReadChanges, so the two agree; historyGap is exactly changesSince < the pruned
// watermark (REC-2), a cursor past the head is CURSOR_AHEAD (REC-3), and nothing is
// written (REC-4).
//
// # Cursors and the one-notice protocol
//
// A watcher's position on a target is a Cursor with three watermarks, all sequences of
// the target, L ≤ N ≤ M (WAT-1): L is what the watcher last acknowledged, N the frozen
// watermark its pending notice covers, M the latest notifying event by another actor.
// A notice is pending exactly when N > L: it is durable cursor state, not a queue
// entry (NTC-5). The transitions are pure functions, and every store runs them inside
// its write transactions:
//
//   - SeedCursor: child_spawned seeds the producer-passed watcher at the spawn (WAT-2);
//   - WatchCursor: an explicit watch starts at the target's head (WAT-3);
//   - ApplyMaterial: a notifying event at s moves M := s and, if nothing is pending,
//     freezes N := s and opens a notice; while one is pending only M moves, so many
//     changes give one notice with unchanged text; the event's own actor is suppressed
//     (NTC-2, WAT-4); log-only kinds and child_spawned never open one (NTC-4);
//   - AckCursor and AckExact: acknowledging sets L := N, never the head, and opens
//     exactly one follow-up when M > N; AckExact only acts while the pending notice is
//     still the one named by its N (NTC-3). AckNamed is the exact form over a
//     watcher's named notices, with an outcome per notice: acknowledged,
//     alreadyAcknowledged, superseded, notPending;
//   - SweepCursor: the startup sweep, Service.Sweep, opens the notice of a cursor with
//     M > N == L, which no committed write leaves behind, and leaves every other
//     cursor, a pending one above all, exactly as it is: a pending notice keeps its N,
//     text and opening time across every restart (NTC-5).
//
// The SQL stores apply ApplyMaterial to a target's cursors as one statement; the
// conformance suite checks it against ApplyMaterial applied cursor by cursor in
// NTC-2_set_based_open_equals_per_cursor.
//
// NoticeText fixes the notice text byte for byte (NTC-1); it carries wake for main
// sessions (NTC-6). Notice.ID identifies a notice by its pair, L and opening time.
//
// # Writes: the group commit and the publisher
//
// Service.RecordEvent hands its AppendOp to the committer in groupcommit.go, and
// Service.RecordBatch, behind recordEvents, the ops of its valid inputs as one unit
// that commits in one transaction or not at all: concurrent appends queue, the first to
// find no commit in flight leads, yields a few times while the queue grows, and
// commits queued units of up to MaxGroupCommit ops in all in one Store.Append
// transaction; then it hands the leadership to the oldest unit still queued. There is
// no timer, and an append is answered only once its transaction committed (SIG-7). A
// shared transaction that fails for a reason other than UNAVAILABLE is retried unit by
// unit, so one bad op cannot fail its neighbours. After the commit the events and
// opened notices go to the publisher in publish.go: one queue, one sender goroutine
// while it is non-empty, in the order writes answered, so an acknowledgement's
// follow-up never overtakes the closed notice before it. Nothing is published before
// its commit (NTC-7), and nothing is queued while the hub has no subscriber. The
// Pruner (SIG-6, WAT-5) hands the notices its cursor expiry closes to
// PrunerConfig.Publish, which the composition root sets to Service.PublishCommitted,
// so they go out in order with the service's own writes.
//
// # The hub and its drop policy
//
// The Hub fans notices and events out to this process's live subscribers. It is a
// wake-up path only: the store is the truth. Service.SubscribeNotices subscribes to
// the hub first, then reads the pending notices from the store and sends them, then
// the live notices held back meanwhile; a per-subscription repeat filter drops a
// notice already sent (NTC-7: at least once into the hub, once per subscription).
// Closed notices, acknowledged or with their cursor removed, are published under a
// filter of their own that only includeClosed subscriptions join. Subscriptions are
// indexed by filter: a watcher, a session, or everything. An idle stream subscription
// holds one channel of one value and no goroutine, and a drainer goroutine exists only
// while it has a backlog. Publishing never blocks: a subscriber holding
// SubscriberBuffer undelivered items when another arrives is dropped at once with
// ErrSlowSubscriber, its queue discarded, and its transport ends the stream; the
// client subscribes again and resumes from durable state, its pending notices and
// changesSince. The hub tells an Interest, the PostgreSQL listener, which watchers and
// sessions have subscribers before the pending read, so a cross-process hint is never
// skipped for a subscription that needs it.
//
// A feed (FEED-1..3) is a stream subscription that resumes and says where it stands:
// an event feed of one session replays the log after a sequence before its live
// events, dropping copies; a gap ends it with ErrFeedGap, which is resumable. A feed
// with marks gets one FeedSynced after its backlog and a FeedBookmark from
// Hub.Bookmark while idle, which one FeedTicker calls for every feed.
//
// # Lock order
//
// In the database, every write transaction touches the session head rows first, then
// event rows, then cursor rows; see models.Store and ARCHITECTURE.md. In this package
// no Go mutex is held while waiting on the store or on a channel send that can block:
// the committer and the publisher release theirs before Store.Append and before
// calling the hub. In the hub a topic's lock is taken before a subscription's, the
// repeat filter runs under the subscription's lock, the Interest is called under the
// topic's lock, so it must not block or call the hub, and so is a sink's End; a
// channel stream's drop callback (WithDropFunc) runs after both are released.
//
// # Other parts
//
// Authorization is one rule in the Service: every method resolves its keys and checks
// the caller's Principal before touching the store (CLT-1). The registry keeps the
// gateway's SessionEntry fields and imports sessions.json (REG-1..3). Adopted sessions
// have two seams here (UPS-1..5): Catalog, the external sessions, and UpstreamStore,
// their links; the monitor that checks them is internal/upstream's. Observer is the
// seam for metrics and traces; NopObserver is the default.
package awareness
