// The notice Watcher: staleNotices(includeClosed) of any number of watcher sessions
// over one connection, graphql-transport-ws (graphql-ws) or Server-Sent Events
// (graphql-sse), with reconnect and backoff; drain, release and exact acknowledgement
// (NTC-3, CLT-5).
import { EventEmitter } from 'node:events';
import { createClient as createWsClient, type Client as WsClient } from 'graphql-ws';
import { createClient as createSseClient, NetworkError, type Client as SseClient } from 'graphql-sse';
import WebSocket from 'ws';
import { AwarenessError, Client, Codes, NOTICE_FIELDS, type Notice, type NoticeAck } from './client.js';
import { resolveWatcher } from './vocab.js';

/** How a Watcher reaches the service: 'auto' takes the WebSocket and falls back to SSE while upgrades are refused. */
export type Transport = 'auto' | 'websocket' | 'sse';

export interface WatcherOptions {
  /** Default 'auto'. */
  transport?: Transport;
  /** Bounds of the reconnect and ack-retry backoff (exponential with jitter; defaults 100 ms and 10 s). */
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /** With 'auto', while on SSE: how often the WebSocket is tried again (default 30 s). */
  upgradeRetryMs?: number;
}

/**
 * A problem of the Watcher's connection or of one watcher's stream. fatal: the stream
 * stopped and is not retried (refused credentials, a watcher the token may not
 * read); otherwise the Watcher retries with backoff. status: the HTTP status of a
 * refused upgrade or SSE request, 0 otherwise.
 */
export class WatcherError extends AwarenessError {
  constructor(message: string, code: string, status: number, readonly fatal: boolean, readonly transport: 'websocket' | 'sse',
    readonly watcher?: string, cause?: unknown, retryAfterMs?: number) {
    super(message, code, status, { cause, retryAfterMs });
    this.name = 'WatcherError';
  }
}

/**
 * ack() could not reach the service (it is down, or the request timed out). The
 * notices stay drained and the Watcher sends the acknowledgement again by itself until
 * the service answers (the 'ack' event carries the outcomes), unless release() hands
 * them back first.
 */
export class AckPendingError extends Error {
  /** The outcomes of the other notices of the same ack() call, which the service did answer. */
  acks: NoticeAck[] = [];
  constructor(readonly notices: Notice[], cause: unknown) {
    super(`awareness watcher: the acknowledgement did not reach the service; the Watcher sends it again (release() hands the notices back): ${cause}`, { cause });
    this.name = 'AckPendingError';
  }
}

const subscription = `subscription($w: String) { staleNotices(watcher: $w, includeClosed: true) { ${NOTICE_FIELDS} closed } }`;
// The most NoticeRefs one acknowledgeNotices call names.
const ackChunk = 100;
// The service sends a keep-alive every 15 s on an SSE stream and answers pings on a
// WebSocket: a stream silent for streamDeadMs is dropped and opened again.
const pingMs = 15_000;
const streamDeadMs = 45_000;
// How long close() tries the acknowledgements still owed.
const closeAckMs = 1000;

// ws emits 'error' when a socket that is still connecting is closed, on the next tick;
// graphql-ws clears its handler as it closes a terminated socket, and an 'error'
// without a listener ends the process. This socket always has one; graphql-ws's own
// handler still sees every error.
class QuietWebSocket extends WebSocket {
  constructor(...args: ConstructorParameters<typeof WebSocket>) {
    super(...args);
    this.on('error', () => {});
  }
}

const key = (n: { watcher: string; targetAgentId: string; target: string }) => `${n.watcher}\0${n.targetAgentId}\0${n.target}`;
const jobKey = (n: { watcher: string; targetAgentId: string; target: string; notifiedVersion: number }) => `${key(n)}\0${n.notifiedVersion}`;
const transient = (code: string) => code === Codes.Unavailable || code === Codes.Internal || code === Codes.RateLimited;

/** One watcher session's stream. */
interface Stream {
  up: boolean;
  /** A stream was up before: the next one that comes up runs the pendingNotices check. */
  wasUp: boolean;
  failed: WatcherError | null;
  retries: number;
  retry?: NodeJS.Timeout;
  link?: Link;
}

/** A drained notice; gone: the service no longer has it pending (release() drops it). */
interface Held { n: Notice; gone: boolean }
interface Waiter { resolve: (a: NoticeAck) => void; reject: (e: unknown) => void }
interface AckJob { n: Notice; waiters: Waiter[] }

/** A transport's connection: it subscribes watchers and reports to its Watcher, and nothing after dispose(). */
interface Link {
  readonly kind: 'websocket' | 'sse';
  subscribe(watcher: string): void;
  unsubscribe(watcher: string): void;
  dispose(): Promise<void>;
}

/**
 * Follows the stale notices of any number of watcher sessions on one connection
 * (staleNotices(watcher, includeClosed: true)) and keeps each notice in one of three
 * states, so that it is handed out once per opening (CLT-5):
 *
 * - open: received, not handed out; drain() hands it out and it is held;
 * - held: handed out and not settled; ack() settles it (acknowledgeNotices, NTC-3),
 *   release() hands it back for the next drain (a turn that failed). A failed ack()
 *   keeps it held and the Watcher sends the acknowledgement again by itself;
 * - done: acknowledged here or anywhere (the closed items), or removed: never handed
 *   out again, whatever the service replays.
 *
 * The service sends every pending notice again after each reconnect and restart
 * (NTC-5): a replay is taken in only when the notice is neither open, held nor done.
 * After each reconnect a pendingNotices query drops what closed while the stream was
 * down. Every drain() must end in ack() or release().
 *
 * Events: 'notice' (watcher) when notices of that watcher can be drained; 'change'
 * (notice) for each item that opened or closed a notice; 'ack' (NoticeAck[]) for the
 * answers to acknowledgements the Watcher sent again by itself; 'connected'
 * (transport); 'transport' (transport) on a switch; 'error' (WatcherError, or the
 * error of a retried acknowledgement) for every problem, fatal or retried. An 'error'
 * without a listener is not thrown; lastError keeps the latest either way.
 */
export class Watcher extends EventEmitter {
  readonly #client: Client;
  readonly #mode: Transport;
  readonly #min: number;
  readonly #max: number;
  readonly #upgradeRetryMs: number;
  #streams = new Map<string, Stream>();
  #open = new Map<string, { n: Notice; confirmed: boolean }>();
  #held = new Map<string, Held>();
  #done = new Map<string, number>();
  #jobs = new Map<string, AckJob>();
  #acking: Promise<void> = Promise.resolve();
  #ackRunning = false;
  #ackWake: (() => void) | null = null;
  #link: Link | null = null;
  #probe: Link | null = null;
  #probeTimer?: NodeJS.Timeout;
  #closed = false;
  #abort = new AbortController();
  #connectedOnce: Promise<void>;
  #markConnected!: () => void;
  /** Replayed items dropped so far. */
  duplicates = 0;
  /** The latest problem (a WatcherError, or the error of a retried acknowledgement); null until one happens. */
  lastError: unknown = null;

  /** Starts following watchers (none is fine: addWatcher() later); throws for a key that cannot watch. */
  constructor(client: Client, watchers: string[] = [], opts: WatcherOptions = {}) {
    super();
    this.#client = client;
    this.#mode = opts.transport ?? 'auto';
    if (!['auto', 'websocket', 'sse'].includes(this.#mode)) throw new Error(`awareness watcher: transport ${this.#mode}: want auto, websocket or sse`);
    this.#min = opts.minBackoffMs ?? 100;
    this.#max = Math.max(opts.maxBackoffMs ?? 10_000, this.#min);
    this.#upgradeRetryMs = opts.upgradeRetryMs ?? 30_000;
    this.#connectedOnce = new Promise((res) => { this.#markConnected = res; });
    const ws = watchers.map(resolveWatcher);
    this.#link = this.#mode === 'sse' ? this.#sseLink() : this.#wsLink();
    for (const w of ws) this.#follow(w);
  }

  /** The transport in use now. */
  get transport(): 'websocket' | 'sse' { return this.#link?.kind ?? (this.#mode === 'sse' ? 'sse' : 'websocket'); }

  /** The watcher sessions followed (canonical keys), sorted. */
  get watchers(): string[] { return [...this.#streams.keys()].sort(); }

  /** Whether every watcher's stream is up (true with none). */
  get connected(): boolean { return [...this.#streams.values()].every((s) => s.up); }

  /** Resolves once a stream is up for the first time. */
  waitConnected(): Promise<void> { return this.#connectedOnce; }

  /**
   * Follows one more watcher session on the same connection and resolves with its
   * canonical key. It first asks the service for the watcher's pending notices with
   * the client's credentials, so a watcher the token may not read is refused here with
   * the service's AwarenessError; when the service cannot be reached the watcher is
   * added all the same and subscribed once it can.
   */
  async addWatcher(watcher: string): Promise<string> {
    const w = resolveWatcher(watcher);
    if (this.#closed) throw new Error('awareness watcher: closed');
    if (this.#streams.has(w)) return w;
    try {
      await this.#client.pendingNotices(w, this.#abort.signal);
    } catch (e) {
      if (e instanceof AwarenessError && e.permanent) throw e;
    }
    if (this.#closed) throw new Error('awareness watcher: closed');
    this.#follow(w);
    return w;
  }

  #follow(w: string) {
    if (this.#streams.has(w)) return;
    this.#streams.set(w, { up: false, wasUp: false, failed: null, retries: 0 });
    this.#start(w);
  }

  /** Stops following a watcher session: its open notices are forgotten (they stay pending in the service); held ones stay until ack() or release(). */
  removeWatcher(watcher: string): void {
    const w = resolveWatcher(watcher);
    const s = this.#streams.get(w);
    if (!s) return;
    this.#streams.delete(w);
    clearTimeout(s.retry);
    s.link?.unsubscribe(w);
    this.#probe?.unsubscribe(w);
    for (const k of this.#open.keys()) if (k.startsWith(w + '\0')) this.#open.delete(k);
  }

  // ---- streams ----------------------------------------------------------------

  #start(w: string) {
    const s = this.#streams.get(w);
    if (!s || this.#closed || !this.#link) return;
    s.link = this.#link;
    this.#link.subscribe(w);
    this.#probe?.subscribe(w);
  }

  /** A link's stream of w is up (connected, or subscribed on a connected socket). */
  #up(link: Link, w: string) {
    const s = this.#streams.get(w);
    if (!s || link !== s.link || s.up) return;
    s.up = true;
    s.failed = null;
    s.retries = 0;
    this.#markConnected();
    if (s.wasUp) void this.#confirm(w);
    s.wasUp = true;
    this.#ackWake?.();
  }

  #item(w: string, n: Notice) {
    if (this.#streams.has(w)) this.#accept(n, true);
  }

  /** A stream of w ended: retry it with backoff, unless the problem is fatal. */
  #down(link: Link, w: string, err: WatcherError | null) {
    const s = this.#streams.get(w);
    if (!s || link !== s.link || this.#closed) return;
    s.up = false;
    for (const [k, t] of this.#open) if (k.startsWith(w + '\0')) t.confirmed = false;
    if (err) this.#report(err);
    if (err?.fatal) {
      s.failed = err;
      this.#client.log.error(`awareness watcher: ${err.message}; not retried`);
      return;
    }
    clearTimeout(s.retry);
    const d = Math.min(this.#min * 2 ** s.retries, this.#max);
    s.retries = Math.min(s.retries + 1, 30);
    s.retry = setTimeout(() => this.#start(w), Math.max(d + Math.random() * d / 2, err?.retryAfterMs ?? 0));
  }

  #report(err: unknown) {
    this.lastError = err;
    this.#client.log.debug(`awareness watcher: ${err}`);
    if (this.listenerCount('error')) this.emit('error', err);
  }

  /** With 'auto': the WebSocket upgrade was refused; follow every watcher over SSE and try the WebSocket again later. */
  #fallBack(from: Link) {
    if (this.#closed || from !== this.#link) return;
    this.#link = this.#sseLink();
    this.#client.log.warn('awareness watcher: the WebSocket upgrade is refused; following notices over SSE');
    this.emit('transport', 'sse');
    void from.dispose();
    for (const [w, s] of this.#streams) {
      clearTimeout(s.retry);
      s.up = false;
      if (!s.failed) this.#start(w);
    }
    this.#scheduleProbe();
  }

  #scheduleProbe() {
    clearTimeout(this.#probeTimer);
    if (this.#closed) return;
    this.#probeTimer = setTimeout(() => {
      if (this.#closed || this.#link?.kind !== 'sse') return;
      this.#probe = this.#wsLink();
      for (const [w, s] of this.#streams) if (!s.failed) this.#probe.subscribe(w);
    }, this.#upgradeRetryMs);
    this.#probeTimer.unref();
  }

  /** The probe WebSocket is connected: it becomes the link; the SSE streams close a moment later, so that nothing falls between. */
  #switchBack(probe: Link) {
    if (this.#closed || probe !== this.#probe) return;
    const old = this.#link!;
    this.#link = probe;
    this.#probe = null;
    for (const [w, s] of this.#streams) {
      if (s.failed) continue;
      clearTimeout(s.retry);
      s.link = probe;
      s.up = false;
      this.#up(probe, w);
    }
    this.#client.log.info('awareness watcher: the WebSocket upgrade works again; following notices over it');
    this.emit('transport', 'websocket');
    this.emit('connected', 'websocket');
    setTimeout(() => void old.dispose(), 1000).unref();
  }

  #probeFailed(probe: Link) {
    if (probe !== this.#probe) return;
    this.#probe = null;
    void probe.dispose();
    this.#scheduleProbe();
  }

  #wsLink(): Link {
    const client = this.#client;
    // A probe until #switchBack makes it the link.
    const probing = () => this.#probe === link;
    const subs = new Map<string, () => void>();
    let connected = false, disposed = false, refused = 0, seen = Date.now();
    let socket: WebSocket | null = null;
    const watchdog = setInterval(() => {
      if (socket && Date.now() - seen > streamDeadMs) socket.terminate();
    }, pingMs);
    watchdog.unref();
    const link: Link = {
      kind: 'websocket',
      subscribe: (w) => {
        subs.get(w)?.();
        let problem: WatcherError | null = null;
        const live = () => !disposed && subs.get(w) === un;
        const un: () => void = ws.subscribe<{ staleNotices: Notice }>({ query: subscription, variables: { w } }, {
          next: (r) => {
            if (!live()) return;
            if (r.errors?.length) problem = streamError(r.errors, 'websocket', w);
            else if (r.data?.staleNotices) this.#item(w, r.data.staleNotices);
          },
          error: (e) => {
            if (!live()) return;
            subs.delete(w);
            if (probing()) return this.#probeFailed(link);
            if (refused && this.#mode === 'auto') return this.#fallBack(link);
            this.#down(link, w, problem ?? (Array.isArray(e) ? streamError(e, 'websocket', w) : socketError(e, w, refused)));
          },
          complete: () => {
            if (!live()) return;
            subs.delete(w);
            if (probing()) return this.#probeFailed(link);
            this.#down(link, w, problem);
          },
        });
        subs.set(w, un);
        if (connected && !probing()) this.#up(link, w);
      },
      unsubscribe: (w) => { const un = subs.get(w); subs.delete(w); un?.(); },
      dispose: async () => {
        disposed = true;
        clearInterval(watchdog);
        for (const un of [...subs.values()]) un();
        subs.clear();
        await Promise.race([ws.dispose(), new Promise((r) => setTimeout(r, 1000).unref())]).catch(() => {});
        ws.terminate();
      },
    };
    const ws: WsClient = createWsClient({
      url: client.wsUrl,
      webSocketImpl: QuietWebSocket,
      connectionParams: () => (client.authorization ? { Authorization: client.authorization } : {}),
      lazy: true,
      retryAttempts: 0,
      keepAlive: pingMs,
      on: {
        connected: (s) => {
          socket = s as WebSocket;
          connected = true;
          refused = 0;
          seen = Date.now();
          if (disposed) return;
          if (probing()) return this.#switchBack(link);
          this.emit('connected', 'websocket');
          for (const w of subs.keys()) this.#up(link, w);
        },
        pong: () => { seen = Date.now(); },
        message: () => { seen = Date.now(); },
        closed: () => { connected = false; socket = null; },
        error: (e: any) => {
          const m = /Unexpected server response: (\d+)/.exec(String(e?.message ?? e?.error?.message ?? ''));
          // Refused: a status that says upgrades do not pass (a proxy's 400, 403, 426 …),
          // not 401, a timeout, a rate limit or a 5xx outage, which are retried.
          const st = m ? Number(m[1]) : 0;
          refused = (st >= 400 && st < 500 && ![401, 408, 429].includes(st)) || st === 501 || st === 505 ? st : 0;
          if (st && !refused && !disposed) this.lastError = new WatcherError(`the WebSocket upgrade got HTTP ${st}`, '', st, false, 'websocket');
        },
      },
    });
    return link;
  }

  #sseLink(): Link {
    const client = this.#client;
    const subs = new Map<string, { un: () => void; seen: number }>();
    let disposed = false;
    const watchdog = setInterval(() => {
      for (const [w, s] of subs) if (Date.now() - s.seen > streamDeadMs) { s.un(); subs.delete(w); this.#down(link, w, null); }
    }, pingMs);
    watchdog.unref();
    // The stream's bytes, keep-alive comments included, tell that it is alive.
    const fetchFn = async (url: string, init: RequestInit) => {
      const w = JSON.parse(String(init.body ?? '{}'))?.variables?.w;
      const res = await fetch(url, init);
      if (!res.body) return res;
      const touch = new TransformStream({ transform: (chunk, ctl) => { const s = subs.get(w); if (s) s.seen = Date.now(); ctl.enqueue(chunk); } });
      return new Response(res.body.pipeThrough(touch), { status: res.status, statusText: res.statusText, headers: res.headers });
    };
    const sse: SseClient = createSseClient({ url: client.endpoint, headers: () => client.headers(), retryAttempts: 0, fetchFn });
    const link: Link = {
      kind: 'sse',
      subscribe: (w) => {
        subs.get(w)?.un();
        let problem: WatcherError | null = null;
        const entry = { un: () => {}, seen: Date.now() };
        const live = () => !disposed && subs.get(w) === entry;
        entry.un = sse.subscribe<{ staleNotices: Notice }>({ query: subscription, variables: { w } }, {
          next: (r) => {
            if (!live()) return;
            if (r.errors?.length) problem = streamError(r.errors as any, 'sse', w);
            else if (r.data?.staleNotices) this.#item(w, r.data.staleNotices);
          },
          error: (e) => {
            if (!live()) return;
            subs.delete(w);
            void sseError(e, w).then((err) => { if (!disposed) this.#down(link, w, problem ?? err); });
          },
          complete: () => {
            if (!live()) return;
            subs.delete(w);
            this.#down(link, w, problem);
          },
        }, {
          connected: () => {
            if (!live()) return;
            this.emit('connected', 'sse');
            this.#up(link, w);
          },
        });
        subs.set(w, entry);
      },
      unsubscribe: (w) => { const s = subs.get(w); subs.delete(w); s?.un(); },
      dispose: async () => {
        disposed = true;
        clearInterval(watchdog);
        for (const s of [...subs.values()]) s.un();
        subs.clear();
        sse.dispose();
      },
    };
    return link;
  }

  // ---- notices ----------------------------------------------------------------

  /** Takes in one notice; fresh: it came on a stream (it confirms an open one after a reconnect). */
  #accept(n: Notice, fresh: boolean) {
    const k = key(n);
    if (!this.#streams.has(n.watcher)) return;
    if (n.closed) {
      this.#settle(k, n.notifiedVersion);
      this.emit('change', n);
      return;
    }
    if ((this.#done.get(k) ?? 0) >= n.notifiedVersion) { this.duplicates++; return; }
    const h = this.#held.get(k);
    const again = (o: Notice) => o.notifiedVersion === n.notifiedVersion && (n.delivery ?? 0) > (o.delivery ?? 0);
    if (h && again(h.n)) {
      // The service handed the held notice out again (RDL-1 redelivery, the end of a snooze): open again.
      this.#held.delete(k);
    } else if (h) {
      // In the caller's hands: ack() settles it, release() hands it back.
      if (h.n.notifiedVersion >= n.notifiedVersion) { this.duplicates++; return; }
      h.gone = true; // the service has a newer one pending
    }
    const t = this.#open.get(k);
    if (t && t.n.notifiedVersion >= n.notifiedVersion && !again(t.n)) { t.confirmed ||= fresh; this.duplicates++; return; }
    this.#open.set(k, { n, confirmed: fresh });
    this.emit('change', n);
    this.emit('notice', n.watcher);
  }

  /** The notice of pair k up to version v was acknowledged or removed: it is never handed out again. */
  #settle(k: string, v: number) {
    if ((this.#done.get(k) ?? 0) < v) this.#done.set(k, v);
    const t = this.#open.get(k);
    if (t && t.n.notifiedVersion <= v) this.#open.delete(k);
    const h = this.#held.get(k);
    if (h && h.n.notifiedVersion <= v) h.gone = true;
  }

  /** After a reconnect: drops the open notices that closed while the stream was down and marks such held ones gone. */
  async #confirm(w: string) {
    let pending: Notice[];
    try {
      pending = await this.#client.pendingNotices(w, this.#abort.signal);
    } catch (e) {
      this.#client.log.debug(`awareness watcher: pendingNotices(${w}) after a reconnect: ${e}`);
      return;
    }
    const have = new Map(pending.map((n) => [key(n), n.notifiedVersion]));
    for (const [k, t] of this.#open) {
      if (t.n.watcher === w && !t.confirmed && have.get(k) !== t.n.notifiedVersion) this.#open.delete(k);
    }
    for (const [k, h] of this.#held) if (h.n.watcher === w && have.get(k) !== h.n.notifiedVersion) h.gone = true;
  }

  #select(map: Map<string, { n: Notice }>, watchers: string[]): Notice[] {
    const ws = new Set(watchers.map(resolveWatcher));
    return [...map.values()].map((t) => t.n)
      .filter((n) => !ws.size || ws.has(n.watcher))
      .sort((a, b) => (a.openedAt < b.openedAt ? -1 : a.openedAt > b.openedAt ? 1 : a.target < b.target ? -1 : a.target > b.target ? 1 : 0));
  }

  /** The open notices drain() would hand out now (of the given watchers, or all), oldest first. */
  pending(...watchers: string[]): Notice[] { return this.#select(this.#open, watchers); }

  /** The notices drained and neither acknowledged nor released (of the given watchers, or all). */
  drained(...watchers: string[]): Notice[] { return this.#select(this.#held, watchers); }

  /** Hands out the open notices to put into the prompt now (of the given watchers, or all), oldest first, each once; they are held until ack() or release(). */
  drain(...watchers: string[]): Notice[] {
    const out = this.pending(...watchers);
    for (const n of out) {
      const k = key(n);
      this.#open.delete(k);
      this.#held.set(k, { n, gone: false });
    }
    return out;
  }

  /**
   * Hands drained notices back (the turn failed before it used them): each one still
   * held, that the service has not acknowledged or replaced meanwhile, is open again
   * for the next drain(). It also stops the Watcher sending a failed ack() of them
   * again. Returns how many were handed back.
   */
  release(drained: Notice[]): number {
    let back = 0;
    for (const n of drained) {
      const k = key(n);
      const job = this.#jobs.get(jobKey(n));
      if (job) {
        this.#jobs.delete(jobKey(n));
        for (const x of job.waiters) x.reject(new Error('awareness watcher: released before the acknowledgement was answered'));
      }
      const h = this.#held.get(k);
      if (!h || h.n.notifiedVersion !== n.notifiedVersion) continue;
      this.#held.delete(k);
      if (h.gone || !this.#streams.has(n.watcher) || (this.#done.get(k) ?? 0) >= n.notifiedVersion) continue;
      const t = this.#open.get(k);
      if (t && t.n.notifiedVersion >= n.notifiedVersion) continue;
      this.#open.set(k, { n: h.n, confirmed: true });
      this.emit('notice', n.watcher);
      back++;
    }
    return back;
  }

  /**
   * Acknowledges exactly the drained notices (acknowledgeNotices, NTC-3) and resolves
   * with the service's outcome for each: acknowledged (its followUp, if any, is kept
   * for the next drain), alreadyAcknowledged (an earlier call whose answer was lost, or
   * someone else), superseded (the pair's pending notice is another one, kept for the
   * next drain) or notPending. Each is settled: never handed out again. When the
   * service cannot be reached it rejects with AckPendingError: the notices stay held
   * and the Watcher sends the acknowledgement again until the service answers (the
   * 'ack' event), unless release() hands them back. A refusal (an AwarenessError:
   * FORBIDDEN, UNAUTHENTICATED, INVALID_ARGUMENT) rejects and leaves them held, to
   * release.
   */
  async ack(drained: Notice[]): Promise<NoticeAck[]> {
    if (this.#closed) throw new Error('awareness watcher: closed');
    if (!drained.length) return [];
    const answers = drained.map((n) => new Promise<NoticeAck>((resolve, reject) => {
      const jk = jobKey(n);
      let job = this.#jobs.get(jk);
      if (!job) this.#jobs.set(jk, (job = { n, waiters: [] }));
      job.waiters.push({ resolve, reject });
    }));
    this.#kickAcks();
    const settled = await Promise.allSettled(answers);
    const refused = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected' && !(r.reason instanceof AckPendingError));
    if (refused) throw refused.reason;
    const owed = drained.filter((_, i) => settled[i].status === 'rejected');
    const acks = settled.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    if (owed.length) {
      const e = new AckPendingError(owed, (settled.find((r) => r.status === 'rejected') as PromiseRejectedResult).reason.cause);
      e.acks = acks;
      throw e;
    }
    return acks;
  }

  /**
   * Hides a notice until `until` (snoozeNotice, RDL-2): the Watcher forgets it (neither
   * open nor held) and the service delivers it again when the snooze ends, with a higher
   * delivery, which the Watcher then hands out as open. A refusal rejects and changes nothing.
   */
  async snooze(notice: Notice, until: Date): Promise<Notice> {
    if (this.#closed) throw new Error('awareness watcher: closed');
    const n = await this.#client.snoozeNotice(notice.watcher, notice, until, this.#abort.signal);
    const k = key(notice);
    if (this.#held.get(k)?.n.notifiedVersion === notice.notifiedVersion) this.#held.delete(k);
    if (this.#open.get(k)?.n.notifiedVersion === notice.notifiedVersion) this.#open.delete(k);
    return n;
  }

  /**
   * Acknowledges a notice without reconciling (dismissNotice, RDL-2) and settles it as
   * ack() does: never handed out again, its follow-up (if any) kept for the next drain.
   * The answer has dismissed set. A refusal rejects and leaves the notice where it was.
   */
  async dismiss(notice: Notice): Promise<NoticeAck> {
    if (this.#closed) throw new Error('awareness watcher: closed');
    const a = await this.#client.dismissNotice(notice.watcher, notice, this.#abort.signal);
    const k = key(a);
    this.#settle(k, a.notifiedVersion);
    if (this.#held.get(k)?.n.notifiedVersion === a.notifiedVersion) this.#held.delete(k);
    if (a.followUp) this.#accept(a.followUp, false);
    if (a.pending) this.#accept(a.pending, false);
    return a;
  }

  #kickAcks() {
    if (this.#ackWake) return this.#ackWake();
    if (this.#ackRunning) return;
    this.#ackRunning = true;
    this.#acking = this.#runAcks();
  }

  /** Sends the queued acknowledgements until each is answered, refused or released. */
  async #runAcks() {
    try {
      await this.#ackLoop();
    } finally {
      this.#ackRunning = false;
    }
  }

  async #ackLoop() {
    let retries = 0;
    while (this.#jobs.size && !this.#abort.signal.aborted) {
      const groups = new Map<string, AckJob[]>();
      for (const job of this.#jobs.values()) {
        const g = groups.get(job.n.watcher) ?? [];
        if (g.length < ackChunk) g.push(job);
        groups.set(job.n.watcher, g);
      }
      let wait = 0;
      for (const [w, jobs] of groups) {
        try {
          this.#answered(jobs, await this.#client.acknowledgeNotices(w, jobs.map((j) => j.n), this.#abort.signal));
          retries = 0;
        } catch (e) {
          const err = e instanceof AwarenessError ? e : new AwarenessError(String(e), '', 0, { cause: e });
          if (this.#abort.signal.aborted) return;
          const background = jobs.some((j) => !j.waiters.length);
          if (err.permanent) {
            for (const j of jobs) {
              if (this.#jobs.get(jobKey(j.n)) === j) this.#jobs.delete(jobKey(j.n));
              for (const x of j.waiters.splice(0)) x.reject(err);
            }
          } else {
            for (const j of jobs) for (const x of j.waiters.splice(0)) x.reject(new AckPendingError([j.n], err));
            const d = Math.min(this.#min * 2 ** retries, this.#max);
            wait = Math.max(wait, err.retryAfterMs ?? d + Math.random() * d / 2);
          }
          this.lastError = err;
          if (background) this.#report(err);
        }
      }
      if (wait) {
        retries++;
        await new Promise<void>((res) => {
          const t = setTimeout(res, wait);
          this.#ackWake = () => { clearTimeout(t); res(); };
        });
        this.#ackWake = null;
      }
    }
  }

  /** Applies the service's outcomes to the Watcher's state and answers the callers. */
  #answered(jobs: AckJob[], answers: NoticeAck[]) {
    const byKey = new Map(answers.map((a) => [jobKey(a), a]));
    const background: NoticeAck[] = [];
    jobs.forEach((j, i) => {
      const a = byKey.get(jobKey(j.n)) ?? answers[i];
      if (this.#jobs.get(jobKey(j.n)) === j) this.#jobs.delete(jobKey(j.n));
      if (!a) {
        for (const x of j.waiters) x.reject(new AwarenessError(`acknowledgeNotices gave no answer for ${j.n.target} at ${j.n.notifiedVersion}`, Codes.Internal, 200));
        return;
      }
      const k = key(a);
      this.#settle(k, a.notifiedVersion);
      if (this.#held.get(k)?.n.notifiedVersion === a.notifiedVersion) this.#held.delete(k);
      if (!j.waiters.length) background.push(a);
      for (const x of j.waiters) x.resolve(a);
      if (a.followUp) this.#accept(a.followUp, false);
      if (a.pending) this.#accept(a.pending, false);
    });
    if (background.length) this.emit('ack', background);
  }

  /**
   * Stops every stream; never rejects. Acknowledgements still owed are tried once more
   * (for at most a second); notices not acknowledged stay pending in the service, which
   * delivers them again to the next Watcher.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#probeTimer);
    for (const s of this.#streams.values()) { clearTimeout(s.retry); s.up = false; }
    const links = [this.#link, this.#probe].filter((l): l is Link => l !== null);
    this.#link = this.#probe = null;
    if (this.#jobs.size) {
      this.#kickAcks();
      await Promise.race([this.#acking, new Promise((r) => setTimeout(r, closeAckMs).unref())]).catch(() => {});
    }
    this.#abort.abort();
    this.#ackWake?.();
    const closed = new Error('awareness watcher: closed');
    for (const j of this.#jobs.values()) for (const x of j.waiters) x.reject(closed);
    this.#jobs.clear();
    await Promise.all(links.map((l) => l.dispose().catch(() => {})));
  }
}

/** The GraphQL errors a stream answered with: fatal unless the service says to try again. */
function streamError(errors: readonly { message: string; extensions?: { code?: string; retryAfterMs?: number } }[], transport: 'websocket' | 'sse', w: string): WatcherError {
  const code = errors[0]?.extensions?.code ?? '';
  return new WatcherError(`staleNotices(${w}) over ${transport}: ${errors[0]?.message}`, code, 0, !transient(code), transport, w, errors,
    errors[0]?.extensions?.retryAfterMs);
}

/** A WebSocket that closed or failed: 4401 (refused credentials) and 4403 are fatal, anything else is retried. */
function socketError(e: unknown, w: string, refused: number): WatcherError {
  const code = typeof e === 'object' && e !== null && 'code' in e ? Number((e as { code: unknown }).code) : 0;
  if (code === 4401) return new WatcherError('the service refused the credentials (WebSocket close 4401)', Codes.Unauthenticated, 401, true, 'websocket', w, e);
  if (code === 4403) return new WatcherError('the service refused the connection (WebSocket close 4403)', Codes.Forbidden, 403, true, 'websocket', w, e);
  if (refused) return new WatcherError(`the WebSocket upgrade is refused (HTTP ${refused})`, '', refused, false, 'websocket', w, e);
  const x = e as { message?: string; error?: { message?: string }; reason?: string };
  const msg = x?.message ?? x?.error?.message ?? (code ? `closed with ${code} ${x.reason ?? ''}`.trim() : String(e));
  return new WatcherError(`the WebSocket failed: ${msg}`, '', 0, false, 'websocket', w, e);
}

/** An SSE stream that failed: a refused token or watcher is fatal, anything else is retried. */
async function sseError(e: unknown, w: string): Promise<WatcherError> {
  const res = e instanceof NetworkError ? (e.response as Response | undefined) : undefined;
  if (!res) return new WatcherError(`the SSE stream failed: ${(e as Error)?.message ?? e}`, '', 0, false, 'sse', w, e);
  let code = '', message = `HTTP ${res.status}`;
  try {
    const body = JSON.parse(await res.text());
    code = body.errors?.[0]?.extensions?.code ?? '';
    message = body.errors?.[0]?.message ?? message;
  } catch { /* not a GraphQL answer */ }
  const fatal = res.status >= 400 && res.status < 500 && ![408, 429].includes(res.status) && !transient(code);
  return new WatcherError(`staleNotices(${w}) over SSE: ${message}`, code || (res.status === 401 ? Codes.Unauthenticated : ''), res.status, fatal, 'sse', w, e);
}
