/**
 * The gateway half of the session state awareness protocol, for TypeScript gateways
 * (CLT-2, CLT-5), on the public GraphQL API only: Recorder (a durable outbox), Watcher
 * (staleNotices with drain, release and exact acknowledgement), EventFeed (one session's
 * events, resumed after the last sequence on every reconnection) and reconcile().
 */
export {
  Client, AwarenessError, Codes, MAX_BATCH,
  type ClientOptions, type Logger, type Notice, type NoticeRef, type NoticeAck, type AckOutcome, type NoticeDigest,
  type WatchCursor, type WatchResult, type RecordEventResult, type RecordEventsItem,
} from './client.js';
export { Recorder, OutboxFullError, RecordTimeoutError, DeliveryError, type Event, type Delivery, type RecorderOptions } from './recorder.js';
export { Watcher, WatcherError, AckPendingError, type Transport, type WatcherOptions } from './watcher.js';
export { EventFeed, type FeedItem, type EventFeedOptions } from './events.js';
export { reconcile, type Reconciliation, type StateEvent, type Target } from './reconcile.js';
export {
  validateEvent, RECORD_FIELDS, resolveSession, resolveWatcher, parseSessionKey, InvalidEventError,
  EVENT_KINDS, ACTOR_TYPES, RUN_OUTCOMES, LIMITS, type EventKind, type ActorType, type RunOutcome, type KindRole,
} from './vocab.js';
