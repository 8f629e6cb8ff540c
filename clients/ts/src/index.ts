/**
 * The gateway half of the session state awareness protocol, for TypeScript gateways
 * (CLT-2), on the public GraphQL API only: Recorder (a durable outbox), Watcher
 * (staleNotices with drain and exact acknowledgement) and reconcile().
 */
export { Client, AwarenessError, Codes, type ClientOptions, type Logger } from './client.js';
export { Recorder, OutboxFullError, RecordTimeoutError, type Event, type Delivery, type RecorderOptions } from './recorder.js';
export { Watcher, type Notice, type WatcherOptions } from './watcher.js';
export { reconcile, type Reconciliation, type StateEvent, type Target } from './reconcile.js';
