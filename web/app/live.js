// The live connection: one graphql-transport-ws WebSocket to /query (the vendored
// graphql-ws client, window.graphqlWs), shared by every subscription of the page.
//
// It reconnects by itself: with backoff capped at 2.5 s on a dropped socket
// (graphql-ws resubscribes the active subscriptions), at once when the browser says it
// is online again or the tab becomes visible, and by building a new client when the
// old one gave up. A connection refused for want of a token (close 4401/4403) asks
// the page's Auth for one and connects again when it is entered.
// A client ping every 10 s that gets no pong within 5 s closes the socket, so a dead
// connection is noticed even when the network drops silently. Listeners see the state
// ('connecting' | 'connected' | 'reconnecting' | 'waiting' | 'offline') and are told
// on every reconnection, so views can re-read what they may have missed.

import { authToken } from './gql.js';

const PING_EVERY_MS = 10000;
const PONG_WITHIN_MS = 5000;
// MAX_BACKOFF_MS caps the wait between two attempts: after an outage the page is live
// again within about this long of the server being back.
export const MAX_BACKOFF_MS = 2500;
const RECREATE_AFTER_MS = 2000;

function wsURL() {
  return (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/query';
}

// backoff is the wait before attempt retries+1: doubling from 250 ms, with jitter,
// never above MAX_BACKOFF_MS (the jitter is taken off, not added on).
export function backoff(retries) {
  const base = Math.min(250 * 2 ** retries, MAX_BACKOFF_MS);
  return Math.round(base * (0.8 + 0.2 * Math.random()));
}

export class Live {
  constructor(auth) {
    this.auth = auth || null;
    this.state = { status: 'connecting' };
    this.subs = new Set();
    this.stateListeners = new Set();
    this.reconnectListeners = new Set();
    this.client = null;
    this.generation = 0;
    this.everConnected = false;
    this.skipWait = null;
    this.recreateTimer = null;
  }

  /** start opens the connection. */
  start() {
    if (!window.graphqlWs) {
      this.setState({ status: 'offline', detail: 'WebSocket client failed to load' });
      return;
    }
    this.connect();
    window.addEventListener('online', () => this.retryNow());
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState === 'visible' && this.state.status !== 'connected') this.retryNow();
    });
    if (this.auth) this.auth.addEventListener('token', () => this.connect());
  }

  /** onState calls fn now and on every state change; it returns the unsubscribe. */
  onState(fn) {
    this.stateListeners.add(fn);
    fn(this.state);
    return () => this.stateListeners.delete(fn);
  }

  /** onReconnect calls fn after every reconnection (not the first connection). */
  onReconnect(fn) {
    this.reconnectListeners.add(fn);
    return () => this.reconnectListeners.delete(fn);
  }

  /** retryNow skips the current backoff wait, or rebuilds a client that gave up. */
  retryNow() {
    if (this.skipWait) this.skipWait();
    else if (this.state.status === 'offline' || this.state.status === 'unauthorised') this.connect();
  }

  setState(s) {
    this.state = s;
    for (const fn of this.stateListeners) fn(s);
  }

  connect() {
    clearTimeout(this.recreateTimer);
    // dispose waits for a connection still being set up; when the server then refuses
    // it (a token entered while the last one is checked), the promise rejects. The old
    // client is done with either way, and its refusal no longer concerns the page.
    if (this.client) Promise.resolve(this.client.dispose()).catch(() => {});
    const gen = ++this.generation;
    let socket = null;
    let pongTimer = null;
    const current = () => gen === this.generation;
    const client = window.graphqlWs.createClient({
      url: wsURL(),
      connectionParams: () => (authToken() ? { Authorization: `Bearer ${authToken()}` } : {}),
      lazy: false,
      keepAlive: PING_EVERY_MS,
      retryAttempts: Infinity,
      shouldRetry: (e) => !(e && e.code === 4403),
      retryWait: (retries) => new Promise((resolve) => {
        const ms = backoff(retries);
        const timer = setTimeout(done, ms);
        function done() { clearTimeout(timer); resolve(); }
        this.skipWait = () => { this.skipWait = null; done(); };
        if (current()) this.setState({ status: 'waiting', retryAt: Date.now() + ms });
      }),
      onNonLazyError: (err) => {
        if (!current()) return;
        if (err && (err.code === 4401 || err.code === 4403)) {
          // Refused for want of a token: the token dialog decides when to try again.
          this.setState({ status: 'unauthorised' });
          if (this.auth) this.auth.refused();
          return;
        }
        this.setState({ status: 'offline' });
        this.recreateTimer = setTimeout(() => { if (current()) this.connect(); }, RECREATE_AFTER_MS);
      },
      on: {
        connecting: (isRetry) => {
          this.skipWait = null;
          if (current()) this.setState({ status: isRetry || this.everConnected ? 'reconnecting' : 'connecting' });
        },
        connected: (s) => {
          socket = s;
          if (!current()) return;
          const again = this.everConnected;
          this.everConnected = true;
          this.setState({ status: 'connected', since: Date.now() });
          if (again) for (const fn of this.reconnectListeners) fn();
        },
        closed: () => {
          clearTimeout(pongTimer);
          socket = null;
          if (current() && this.state.status === 'connected') this.setState({ status: 'reconnecting' });
        },
        ping: (received) => {
          if (received) return;
          clearTimeout(pongTimer);
          pongTimer = setTimeout(() => {
            if (socket && socket.readyState === WebSocket.OPEN) socket.close(4408, 'pong timeout');
          }, PONG_WITHIN_MS);
        },
        pong: (received) => { if (received) clearTimeout(pongTimer); },
      },
    });
    this.client = client;
    for (const s of this.subs) this.attach(s);
  }

  /**
   * subscribe starts a subscription that survives reconnections. handlers.next gets
   * each payload's data; handlers.error gets GraphQL errors (the operation is then
   * dropped: the server refused it). It returns the unsubscribe function.
   */
  subscribe(query, variables, handlers) {
    const s = { query, variables, handlers, dispose: null, closed: false, failed: false, client: null };
    this.subs.add(s);
    this.attach(s);
    return () => {
      s.closed = true;
      this.subs.delete(s);
      if (s.dispose) s.dispose();
    };
  }

  attach(s) {
    const client = this.client;
    if (!client || s.closed || s.failed) return;
    s.client = client;
    s.dispose = client.subscribe({ query: s.query, variables: s.variables }, {
      next: (r) => {
        if (r.errors && r.errors.length) {
          s.failed = true;
          if (s.handlers.error) s.handlers.error(r.errors);
          return;
        }
        if (r.data) s.handlers.next(r.data);
      },
      error: (err) => {
        if (Array.isArray(err)) {
          if (err.length && err.every((e) => e.extensions && e.extensions.code === 'UNAVAILABLE')) {
            // Retryable: the server is shutting down, or dropped this stream for falling
            // behind. Start it again, as after complete; after a restart, connect()
            // re-attaches it on the new connection.
            this.again(s);
            return;
          }
          s.failed = true;
          this.subs.delete(s);
          if (s.handlers.error) s.handlers.error(err);
        }
        // Otherwise the connection failed for good: connect() re-attaches it.
      },
      complete: () => this.again(s),
    });
  }

  /** again starts a stream the server ended again, unless we asked for the end. */
  again(s) {
    if (s.closed || s.failed || s.client !== this.client) return;
    const client = s.client;
    s.client = null;
    setTimeout(() => { if (!s.closed && !s.client && client === this.client) this.attach(s); }, 1000);
  }
}
