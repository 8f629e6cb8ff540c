// The durable outbox (SIG-7, CLT-2): the same file format as the Go client's, so
// either can deliver what the other spooled.
import { EventEmitter } from 'node:events';
import { randomBytes, createHash } from 'node:crypto';
import { promises as fsp, openSync, closeSync, writeSync, readFileSync, unlinkSync, constants } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';
import { Client, AwarenessError, Codes, MAX_BATCH, type RecordEventsItem } from './client.js';
import { validateEvent, resolveSession, type EventKind, type ActorType } from './vocab.js';

/** One event to record: the fields of the GraphQL RecordEventInput. */
export interface Event {
  sessionKey: string;
  agentId?: string;
  kind: EventKind;
  actorType: ActorType;
  actorId?: string;
  summary?: string;
  /** Defaults to the time of record(), so an event delivered after an outage keeps its time; a Date is spooled as its ISO string. */
  occurredAt?: string | Date;
  runId?: string;
  /** How a run_failed run ended: one of RUN_OUTCOMES. */
  outcome?: string;
  channel?: string;
  turns?: number;
  /** Defaults to a generated random key: the service records the event once however often it is delivered (SIG-4). */
  dedupeKey?: string;
  watchers?: string[];
}

/** The service's answer to one delivered event. */
export interface Delivery {
  /** The event as spooled (with its dedupeKey and occurredAt). */
  event: Event;
  /** False when the service had the event already (a replay), or refused it. */
  recorded: boolean;
  sequence: number;
  stateVersion: number;
  /** Set when the service refused the event for good; it is dropped from the outbox (and the 'error' event tells it too). */
  error?: DeliveryError;
}

export interface RecorderOptions {
  /** Bounds the undelivered events held (default 64 MiB). */
  maxBytes?: number;
  /** Bounds how long record() waits for the local fsync (default 2 s). It never waits for the service. */
  recordTimeoutMs?: number;
  /** Sessions delivered in parallel (default 4); one session's events go through one sender, in order. */
  senders?: number;
  /** The most events one request delivers (recordEvents, default and at most 200). */
  batchSize?: number;
  /** The file is rewritten without its delivered events once it is this large and at least twice its live content (default 4 MiB). */
  compactBytes?: number;
  /** Called for every event the service answered for; the same as the 'delivery' event. */
  onDelivery?: (d: Delivery) => void;
}

/** The service refused a spooled event for good (FORBIDDEN for the token, …); it is dropped from the outbox. */
export class DeliveryError extends AwarenessError {
  constructor(readonly event: Event, message: string, code: string) {
    super(message, code, 200);
    this.name = 'DeliveryError';
  }
}

/** The outbox holds maxBytes of undelivered events; the event was not spooled. */
export class OutboxFullError extends Error {
  constructor() { super('awareness recorder: the outbox is full (the service has not taken the spooled events); the event was not recorded'); }
}
/**
 * The fsync did not finish within recordTimeoutMs; the event may or may not be spooled
 * (and then it is delivered). Retrying with the same object, or with event, never
 * duplicates it: both carry the same dedupeKey.
 */
export class RecordTimeoutError extends Error {
  constructor(readonly event: Event) { super('awareness recorder: the outbox write did not finish in time; the event may or may not be recorded'); }
}

interface Spooled { id: number; ev: Event; bytes: number }
interface Batch { buf: string[]; entries: Spooled[]; done: Promise<void>; resolve: () => void; reject: (e: unknown) => void }
interface Lane { queue: Spooled[]; running: boolean; size: number; limited: number }
// What record() did with one caller's object: a retry with the same object is the same event.
interface Recorded { ev: Event; done: Promise<void>; fingerprint: string }

const compactMinBytes = 4 << 20;
const retryMin = 100, retryMax = 5000;
// A request stays well under the service's 1 MiB body limit.
const maxBatchBytes = 512 << 10;

/** The sender of a session: its canonical (agent, key) hashed, so that all its events go through one sender. */
function laneOf(ev: Event, n: number, cache: Map<string, number>): number {
  const raw = `${ev.agentId ?? ''}\0${ev.sessionKey}`;
  let lane = cache.get(raw);
  if (lane === undefined) {
    let id: string;
    try {
      const r = resolveSession(ev.sessionKey, ev.agentId ?? undefined);
      id = `${r.agentId}\0${r.key}`;
    } catch {
      id = `${String(ev.agentId ?? '').trim().toLowerCase()}\0${String(ev.sessionKey).trim().toLowerCase()}`;
    }
    lane = createHash('sha1').update(id).digest().readUInt32BE(0) % n;
    if (cache.size > 10_000) cache.clear();
    cache.set(raw, lane);
  }
  return lane;
}

function alive(pid: number): boolean {
  try { process.kill(pid, 0); return true; } catch (e: any) { return e.code === 'EPERM'; }
}

/**
 * Records events through a durable local outbox. record() checks the event as the
 * service would (refusing at once what it would refuse), resolves once the event is
 * fsync'd to the outbox file (concurrent records share one fsync) and never waits for
 * the service; senders deliver the spooled events with recordEvents, in batches, in
 * order per session, retrying with backoff (and after retryAfterMs when rate
 * limited), each with its dedupeKey, so every event reaches the log exactly once
 * across outages of the service and crashes of the gateway. One process at a time
 * owns an outbox (<path>.lock holds its pid; a dead owner's lock is taken over).
 *
 * Events: 'delivery' (Delivery) for each event the service answered for; 'error'
 * (AwarenessError) when the service refused an event for good (it is dropped) or the
 * credentials (delivery stops until resume(); record() still spools). An 'error'
 * without a listener is not thrown; lastError keeps the latest either way.
 */
export class Recorder extends EventEmitter {
  private fh!: FileHandle;
  private fileBytes = 0;
  private nextId = 0;
  private pendingMap = new Map<number, Spooled>();
  private liveBytes = 0;
  private cur: Batch | null = null;
  private writing = 0;
  private fileOps: Promise<void> = Promise.resolve();
  private lanes: Lane[] = [];
  private laneCache = new Map<string, number>();
  private closed = false;
  private broken: unknown = null;
  private abort = new AbortController();
  private idleWaiters: (() => void)[] = [];
  private recorded = new WeakMap<object, Recorded>();
  private singleMode = false;
  /** Set while delivery is stopped: the service refused the credentials (resume() restarts it). */
  stopped: AwarenessError | null = null;
  /** The latest error: an event the service refused, a refused token, an outbox write. */
  lastError: unknown = null;
  /** Delivery counters: requests sent, RATE_LIMITED answers, other failed requests, events delivered and dropped. */
  readonly stats = { requests: 0, rateLimited: 0, failures: 0, delivered: 0, dropped: 0 };
  private readonly opts: Required<Omit<RecorderOptions, 'onDelivery'>> & Pick<RecorderOptions, 'onDelivery'>;

  private constructor(private readonly client: Client, readonly path: string, opts: RecorderOptions) {
    super();
    this.opts = {
      maxBytes: opts.maxBytes ?? 64 << 20, recordTimeoutMs: opts.recordTimeoutMs ?? 2000, senders: opts.senders ?? 4,
      batchSize: Math.max(1, Math.min(opts.batchSize ?? MAX_BATCH, MAX_BATCH)),
      compactBytes: opts.compactBytes ?? compactMinBytes, onDelivery: opts.onDelivery,
    };
  }

  /** Opens (or creates) the outbox at path and starts delivering what it holds. */
  static async open(client: Client, path: string, opts: RecorderOptions = {}): Promise<Recorder> {
    const r = new Recorder(client, path, opts);
    r.lock();
    try {
      const entries = r.load();
      await r.rewrite(entries);
      for (let i = 0; i < r.opts.senders; i++) r.lanes.push({ queue: [], running: false, size: r.opts.batchSize, limited: 0 });
      for (const s of entries) r.liveBytes += s.bytes;
      r.publish(entries);
      if (entries.length) client.log.info(`awareness recorder: replaying ${entries.length} spooled events from ${path}`);
    } catch (e) {
      r.unlock();
      throw e;
    }
    return r;
  }

  private lock() {
    const p = this.path + '.lock';
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        const fd = openSync(p, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600);
        writeSync(fd, String(process.pid));
        closeSync(fd);
        return;
      } catch (e: any) {
        if (e.code !== 'EEXIST') throw e;
        const pid = Number(readFileSync(p, 'utf8'));
        if (pid && pid !== process.pid && alive(pid)) throw new Error(`awareness recorder: the outbox ${this.path} is in use by process ${pid}`);
        if (pid === process.pid) throw new Error(`awareness recorder: the outbox ${this.path} is already open in this process`);
        unlinkSync(p); // its owner died
      }
    }
    throw new Error(`awareness recorder: cannot lock ${this.path}`);
  }

  private unlock() {
    try { unlinkSync(this.path + '.lock'); } catch { /* gone already */ }
  }

  /** Reads the undelivered events, in recording order; a torn last line (a crash mid-write) is ignored. */
  private load(): Spooled[] {
    let text: string;
    try { text = readFileSync(this.path, 'utf8'); } catch (e: any) { if (e.code === 'ENOENT') return []; throw e; }
    const live = new Map<number, Spooled>();
    const lines = text.split('\n');
    lines.pop(); // the part after the last newline: empty, or torn
    for (const line of lines) {
      let l: { id?: number; e?: Event; done?: number };
      try { l = JSON.parse(line); } catch { this.client.log.warn('awareness recorder: skipping a malformed outbox line'); continue; }
      if (l.id && l.id > this.nextId) this.nextId = l.id;
      if (l.e && l.id) live.set(l.id, { id: l.id, ev: l.e, bytes: Buffer.byteLength(line) + 1 });
      else if (l.done) live.delete(l.done);
    }
    return [...live.values()].sort((a, b) => a.id - b.id);
  }

  /** Replaces the file with the put lines of entries: temporary file, fsync, rename, fsync the directory. */
  private async rewrite(entries: Spooled[]) {
    const tmp = this.path + '.tmp';
    const body = entries.map((s) => JSON.stringify({ id: s.id, e: s.ev }) + '\n').join('');
    const f = await fsp.open(tmp, 'w', 0o600);
    try { await f.writeFile(body); await f.sync(); } finally { await f.close(); }
    await fsp.rename(tmp, this.path);
    const d = await fsp.open(dirname(this.path), 'r');
    try { await d.sync(); } finally { await d.close(); }
    if (this.fh) await this.fh.close();
    this.fh = await fsp.open(this.path, 'a', 0o600);
    this.fileBytes = Buffer.byteLength(body);
  }

  /** Serialises every file operation. */
  private fileOp(fn: () => Promise<void>): Promise<void> {
    const p = this.fileOps.then(fn);
    this.fileOps = p.catch(() => {});
    return p;
  }

  /**
   * Spools ev durably and resolves with the event as spooled (its dedupeKey and
   * occurredAt filled in). It first checks ev as the service would and rejects with
   * the InvalidEventError the service would answer, spooling nothing (CLT-5). It
   * resolves only once the event is fsync'd: from then on it reaches the service's log
   * exactly once. It waits at most recordTimeoutMs (RecordTimeoutError), never for the
   * service; OutboxFullError at the bound. Recording the same object again, unchanged,
   * is the same event (its generated dedupeKey is kept): a retry never duplicates.
   */
  async record(input: Event): Promise<Event> {
    if (this.closed) throw new Error('awareness recorder: closed');
    if (this.broken) throw new Error(`awareness recorder: the outbox cannot be written: ${this.broken}`);
    const again = typeof input === 'object' && input !== null ? this.recorded.get(input) : undefined;
    if (again && again.fingerprint === JSON.stringify(input)) {
      await this.wait(again.done, again.ev);
      return again.ev;
    }
    const fields = Object.entries(input).map(([k, v]) => [k, v instanceof Date ? (Number.isNaN(v.getTime()) ? 'Invalid Date' : v.toISOString()) : v]);
    validateEvent(Object.fromEntries(fields));
    const ev = Object.fromEntries(fields.filter(([, v]) => v !== undefined && v !== null)) as unknown as Event;
    ev.dedupeKey ??= 'outbox-' + randomBytes(16).toString('hex');
    ev.occurredAt ??= new Date().toISOString();
    const id = ++this.nextId;
    const line = JSON.stringify({ id, e: ev }) + '\n';
    const s: Spooled = { id, ev, bytes: Buffer.byteLength(line) };
    if (this.liveBytes + s.bytes > this.opts.maxBytes) throw new OutboxFullError();
    this.liveBytes += s.bytes;
    if (!this.cur) {
      let resolve!: () => void, reject!: (e: unknown) => void;
      const done = new Promise<void>((res, rej) => { resolve = res; reject = rej; });
      done.catch(() => {});
      this.cur = { buf: [], entries: [], done, resolve, reject };
      void this.fileOp(() => this.flushOnce());
    }
    const b = this.cur;
    b.buf.push(line);
    b.entries.push(s);
    this.recorded.set(input, { ev, done: b.done, fingerprint: JSON.stringify(input) });
    await this.wait(b.done, ev);
    return ev;
  }

  private async wait(done: Promise<void>, ev: Event) {
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([done, new Promise<void>((_, rej) => { timer = setTimeout(() => rej(new RecordTimeoutError(ev)), this.opts.recordTimeoutMs); })]);
    } finally {
      clearTimeout(timer);
    }
  }

  private async flushOnce() {
    const b = this.cur;
    this.cur = null;
    if (!b) return;
    this.writing = b.entries.length;
    const data = b.buf.join('');
    try {
      await this.fh.write(data);
      await this.fh.sync();
      this.fileBytes += Buffer.byteLength(data);
      this.writing = 0;
      this.publish(b.entries);
      b.resolve();
    } catch (e) {
      this.writing = 0;
      this.broken = e;
      this.lastError = e;
      for (const s of b.entries) this.liveBytes -= s.bytes;
      this.client.log.error(`awareness recorder: outbox write failed; record refuses from now on: ${e}`);
      b.reject(e);
    }
  }

  private publish(entries: Spooled[]) {
    for (const s of entries) {
      this.pendingMap.set(s.id, s);
      this.lanes[laneOf(s.ev, this.lanes.length, this.laneCache)].queue.push(s);
    }
    this.startLanes();
  }

  private startLanes() {
    for (const lane of this.lanes) if (!lane.running && lane.queue.length) void this.send(lane);
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((res) => {
      const onAbort = () => { clearTimeout(t); res(); };
      const t = setTimeout(() => { this.abort.signal.removeEventListener('abort', onAbort); res(); }, ms);
      this.abort.signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  private fail(e: AwarenessError) {
    this.lastError = e;
    if (this.listenerCount('error')) this.emit('error', e);
  }

  /** The head of a lane that fits one request: at most lane.size events and maxBatchBytes. */
  private batchOf(lane: Lane): Spooled[] {
    const n = this.singleMode ? 1 : lane.size;
    const out: Spooled[] = [];
    let bytes = 0;
    for (const s of lane.queue) {
      if (out.length === n || (out.length && bytes + s.bytes > maxBatchBytes)) break;
      out.push(s);
      bytes += s.bytes;
    }
    return out;
  }

  /** Delivers one lane head first, in batches, until the service has answered for every event. */
  private async send(lane: Lane) {
    lane.running = true;
    let delay = retryMin;
    try {
      while (lane.queue.length && !this.closed && !this.stopped) {
        const batch = this.batchOf(lane);
        const single = this.singleMode;
        let items: RecordEventsItem[];
        this.stats.requests++;
        try {
          items = single
            ? [{ index: 0, result: await this.client.recordEvent(batch[0].ev as unknown as Record<string, unknown>, this.abort.signal), error: null }]
            : await this.client.recordEvents(batch.map((s) => s.ev as unknown as Record<string, unknown>), this.abort.signal);
        } catch (e) {
          if (this.closed) return;
          const err = e instanceof AwarenessError ? e : new AwarenessError(String(e), '', 0, { cause: e });
          if (err.unauthenticated) {
            this.stopped = err;
            this.client.log.error(`awareness recorder: the service refused the credentials; delivery stops until resume() (${this.pending()} events stay spooled): ${err.message}`);
            this.fail(err);
            return;
          }
          if (!single && err.code === 'GRAPHQL_VALIDATION_FAILED' && /recordEvents/.test(err.message)) {
            if (!this.singleMode) this.client.log.warn('awareness recorder: the service has no recordEvents; delivering one event per request');
            this.singleMode = true;
            continue;
          }
          if (err.code === Codes.RateLimited) this.stats.rateLimited++;
          else this.stats.failures++;
          if (err.code === Codes.RateLimited) {
            // A batch larger than the caller's burst would never pass: halve it after three refusals in a row.
            if (++lane.limited % 3 === 0) lane.size = Math.max(1, lane.size >> 1);
            await this.sleep((err.retryAfterMs ?? delay) * (1 + Math.random() / 10));
            continue;
          }
          if (!err.permanent) {
            this.client.log.debug(`awareness recorder: delivery failed, retrying in ${delay} ms: ${err.message}`);
            await this.sleep(delay + Math.random() * delay / 2);
            delay = Math.min(2 * delay, retryMax);
            continue;
          }
          if (batch.length > 1) {
            // Refused as a whole: find the event it is about by halving.
            lane.size = Math.max(1, batch.length >> 1);
            continue;
          }
          items = [{ index: 0, result: null, error: { code: err.code, message: err.detail } }];
        }
        delay = retryMin;
        lane.limited = 0;
        lane.size = Math.min(this.opts.batchSize, lane.size * 2);
        // An input the service could not take now is sent again with everything after it
        // (those it appended are deduplicated then, SIG-4).
        const byIndex = new Map(items.map((it) => [it.index, it]));
        const done: Spooled[] = [];
        let retry = false;
        for (let i = 0; i < batch.length && !retry; i++) {
          const s = batch[i], item = byIndex.get(i);
          if (!item || (item.error && [Codes.Unavailable, Codes.Internal, Codes.RateLimited].includes(item.error.code as never))) {
            retry = true;
            break;
          }
          done.push(s);
          const err = item.error ? new DeliveryError(s.ev, item.error.message, item.error.code) : undefined;
          if (err) this.stats.dropped++;
          else this.stats.delivered++;
          if (err) {
            this.client.log.error(`awareness recorder: the service refused a spooled event; dropping it: ${err.message}`);
            this.fail(err);
          }
          const d: Delivery = {
            event: s.ev, recorded: item.result?.recorded ?? false, sequence: item.result?.event.sequence ?? 0,
            stateVersion: item.result?.stateVersion ?? 0, error: err,
          };
          this.opts.onDelivery?.(d);
          if (this.listenerCount('delivery')) this.emit('delivery', d);
        }
        this.delivered(lane, done);
        if (retry) await this.sleep(delay);
        if (this.pending() === 0) for (const w of this.idleWaiters.splice(0)) w();
      }
    } finally {
      lane.running = false;
    }
  }

  /** Takes delivered events out of their lane and marks them done in the file. */
  private delivered(lane: Lane, done: Spooled[]) {
    if (!done.length) return;
    // done is the head of the lane: its batch, up to the first input to send again.
    if (lane.queue[0] === done[0]) lane.queue.splice(0, done.length);
    else lane.queue = lane.queue.filter((s) => !done.includes(s));
    for (const s of done) {
      this.pendingMap.delete(s.id);
      this.liveBytes -= s.bytes;
    }
    // Not fsync'd: a mark lost in a crash only makes the event be delivered again, harmlessly.
    void this.fileOp(async () => {
      const marks = done.map((s) => JSON.stringify({ done: s.id }) + '\n').join('');
      await this.fh.write(marks);
      this.fileBytes += Buffer.byteLength(marks);
      if (this.fileBytes > this.opts.compactBytes && this.fileBytes > 2 * this.liveBytes && this.cur === null) {
        await this.rewrite([...this.pendingMap.values()].sort((a, b) => a.id - b.id));
      }
    }).catch((e) => this.client.log.warn(`awareness recorder: delivery mark: ${e}`));
  }

  /** Restarts delivery after the service refused the credentials (call it once the token is fixed: Client.setToken). */
  resume(): void {
    if (!this.stopped || this.closed) return;
    this.stopped = null;
    this.startLanes();
  }

  /** The number of events recorded and not yet delivered. */
  pending(): number {
    return this.pendingMap.size + this.writing + (this.cur?.entries.length ?? 0);
  }

  /** Resolves once every event recorded so far is delivered; rejects after timeoutMs, or at once while delivery is stopped. */
  async flush(timeoutMs = 60_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.pending() > 0) {
      if (this.stopped) throw this.stopped;
      if (Date.now() > deadline) throw new Error(`awareness recorder: ${this.pending()} events still undelivered after ${timeoutMs} ms`);
      await new Promise<void>((res) => { this.idleWaiters.push(res); setTimeout(res, 50); });
    }
    await this.fileOps; // the delivery marks (and a compaction) are written
  }

  /** Stops the senders and closes the outbox; undelivered events stay for the next open(). Idempotent; never rejects. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.abort.abort();
    await this.fileOps;
    try {
      await this.fh.sync().catch(() => {});
      await this.fh.close();
    } catch (e) {
      this.client.log.warn(`awareness recorder: closing the outbox: ${e}`);
    }
    this.unlock();
  }
}
