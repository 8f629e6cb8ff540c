// The durable outbox (SIG-7, CLT-2): the same file format as the Go client's, so
// either can deliver what the other spooled.
import { randomBytes, createHash } from 'node:crypto';
import { promises as fsp, openSync, closeSync, writeSync, readFileSync, unlinkSync, constants } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';
import { Client, AwarenessError } from './client.js';

/** One event to record: the fields of the GraphQL RecordEventInput. */
export interface Event {
  sessionKey: string;
  agentId?: string;
  kind: string;
  actorType: string;
  actorId?: string;
  summary?: string;
  /** Defaults to the time of record(), so an event delivered after an outage keeps its time. */
  occurredAt?: string;
  runId?: string;
  outcome?: string;
  channel?: string;
  turns?: number;
  /** Defaults to a generated random key: the service records the event once however often it is delivered (SIG-4). */
  dedupeKey?: string;
  watchers?: string[];
}

export interface Delivery {
  event: Event;
  /** False when the service had the event already (a replay). */
  recorded: boolean;
  sequence: number;
  stateVersion: number;
  /** Set when the service refused the event for good; it is dropped from the outbox. */
  error?: AwarenessError;
}

export interface RecorderOptions {
  /** Bounds the undelivered events held (default 64 MiB). */
  maxBytes?: number;
  /** Bounds how long record() waits for the local fsync (default 2 s). It never waits for the service. */
  recordTimeoutMs?: number;
  /** Sessions delivered in parallel (default 4); one session's events go through one sender, in order. */
  senders?: number;
  /** The file is rewritten without its delivered events once it is this large and at least twice its live content (default 4 MiB). */
  compactBytes?: number;
  onDelivery?: (d: Delivery) => void;
}

/** The outbox holds maxBytes of undelivered events; the event was not spooled. */
export class OutboxFullError extends Error {
  constructor() { super('awareness recorder: the outbox is full (the service has not taken the spooled events); the event was not recorded'); }
}
/** The fsync did not finish within recordTimeoutMs; the event may or may not be spooled (and then it is delivered). */
export class RecordTimeoutError extends Error {
  constructor() { super('awareness recorder: the outbox write did not finish in time; the event may or may not be recorded'); }
}

interface Spooled { id: number; ev: Event; bytes: number }
interface Batch { buf: string[]; entries: Spooled[]; done: Promise<void>; resolve: () => void; reject: (e: unknown) => void }
interface Lane { queue: Spooled[]; running: boolean }

const recordMutation = `mutation($in: RecordEventInput!) { recordEvent(input: $in) { recorded stateVersion event { sequence } } }`;
const compactMinBytes = 4 << 20;
const retryMin = 100, retryMax = 5000;

function laneOf(ev: Event, n: number): number {
  const h = createHash('sha1').update(`${(ev.agentId ?? '').trim().toLowerCase()}\0${ev.sessionKey.trim().toLowerCase()}`).digest();
  return h.readUInt32BE(0) % n;
}

function alive(pid: number): boolean {
  try { process.kill(pid, 0); return true; } catch (e: any) { return e.code === 'EPERM'; }
}

/**
 * Records events through a durable local outbox. record() resolves once the event is
 * fsync'd to the outbox file (concurrent records share one fsync) and never waits for
 * the service; senders deliver the spooled events in order per session, retrying with
 * backoff, each with its dedupeKey, so every event reaches the log exactly once across
 * outages of the service and crashes of the gateway. One process at a time owns an
 * outbox (<path>.lock holds its pid; a dead owner's lock is taken over).
 */
export class Recorder {
  private fh!: FileHandle;
  private fileBytes = 0;
  private nextId = 0;
  private pendingMap = new Map<number, Spooled>();
  private liveBytes = 0;
  private cur: Batch | null = null;
  private writing = 0;
  private fileOps: Promise<void> = Promise.resolve();
  private lanes: Lane[] = [];
  private closed = false;
  private broken: unknown = null;
  private abort = new AbortController();
  private idleWaiters: (() => void)[] = [];
  private readonly opts: Required<Omit<RecorderOptions, 'onDelivery'>> & Pick<RecorderOptions, 'onDelivery'>;

  private constructor(private readonly client: Client, readonly path: string, opts: RecorderOptions) {
    this.opts = {
      maxBytes: opts.maxBytes ?? 64 << 20, recordTimeoutMs: opts.recordTimeoutMs ?? 2000, senders: opts.senders ?? 4,
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
      for (let i = 0; i < r.opts.senders; i++) r.lanes.push({ queue: [], running: false });
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
   * Spools ev durably. It resolves only once the event is fsync'd: from then on it
   * reaches the service's log exactly once. It waits at most recordTimeoutMs
   * (RecordTimeoutError), never for the service; OutboxFullError at the bound.
   */
  async record(input: Event): Promise<void> {
    if (this.closed) throw new Error('awareness recorder: closed');
    if (this.broken) throw new Error(`awareness recorder: the outbox cannot be written: ${this.broken}`);
    if (!input.sessionKey?.trim() || !input.kind || !input.actorType) throw new Error('awareness recorder: an event needs sessionKey, kind and actorType');
    const ev: Event = { ...input, dedupeKey: input.dedupeKey ?? 'outbox-' + randomBytes(16).toString('hex'), occurredAt: input.occurredAt ?? new Date().toISOString() };
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
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([b.done, new Promise<void>((_, rej) => { timer = setTimeout(() => rej(new RecordTimeoutError()), this.opts.recordTimeoutMs); })]);
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
      for (const s of b.entries) this.liveBytes -= s.bytes;
      this.client.log.error(`awareness recorder: outbox write failed; record refuses from now on: ${e}`);
      b.reject(e);
    }
  }

  private publish(entries: Spooled[]) {
    for (const s of entries) {
      this.pendingMap.set(s.id, s);
      const lane = this.lanes[laneOf(s.ev, this.lanes.length)];
      lane.queue.push(s);
      if (!lane.running) void this.send(lane);
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((res) => {
      const onAbort = () => { clearTimeout(t); res(); };
      const t = setTimeout(() => { this.abort.signal.removeEventListener('abort', onAbort); res(); }, ms);
      this.abort.signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Delivers one lane head first, retrying until the service answers for good. */
  private async send(lane: Lane) {
    lane.running = true;
    let delay = retryMin;
    try {
      while (lane.queue.length && !this.closed) {
        const head = lane.queue[0];
        let res: any, err: AwarenessError | undefined;
        try {
          res = await this.client.request(recordMutation, { in: head.ev }, this.abort.signal);
        } catch (e) {
          if (this.closed) return;
          // UNAUTHENTICATED is retried too: an event must not be lost while an operator fixes the token.
          if (!(e instanceof AwarenessError) || !e.permanent || e.code === 'UNAUTHENTICATED') {
            this.client.log.debug(`awareness recorder: delivery failed, retrying in ${delay} ms: ${e}`);
            await this.sleep(delay + Math.random() * delay / 2);
            delay = Math.min(2 * delay, retryMax);
            continue;
          }
          err = e;
          this.client.log.error(`awareness recorder: the service refused a spooled event; dropping it: ${e}`);
        }
        delay = retryMin;
        lane.queue.shift();
        this.pendingMap.delete(head.id);
        this.liveBytes -= head.bytes;
        // Not fsync'd: a mark lost in a crash only makes the event be delivered again, harmlessly.
        void this.fileOp(async () => {
          const mark = JSON.stringify({ done: head.id }) + '\n';
          await this.fh.write(mark);
          this.fileBytes += Buffer.byteLength(mark);
          if (this.fileBytes > this.opts.compactBytes && this.fileBytes > 2 * this.liveBytes && this.cur === null) {
            await this.rewrite([...this.pendingMap.values()].sort((a, b) => a.id - b.id));
          }
        }).catch((e) => this.client.log.warn(`awareness recorder: delivery mark: ${e}`));
        this.opts.onDelivery?.({
          event: head.ev, recorded: res?.recordEvent.recorded ?? false, sequence: res?.recordEvent.event.sequence ?? 0,
          stateVersion: res?.recordEvent.stateVersion ?? 0, error: err,
        });
        if (this.pending() === 0) for (const w of this.idleWaiters.splice(0)) w();
      }
    } finally {
      lane.running = false;
    }
  }

  /** The number of events recorded and not yet delivered. */
  pending(): number {
    return this.pendingMap.size + this.writing + (this.cur?.entries.length ?? 0);
  }

  /** Resolves once every event recorded so far is delivered (rejects after timeoutMs). */
  async flush(timeoutMs = 60_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.pending() > 0) {
      if (Date.now() > deadline) throw new Error(`awareness recorder: ${this.pending()} events still undelivered after ${timeoutMs} ms`);
      await new Promise<void>((res) => { this.idleWaiters.push(res); setTimeout(res, 50); });
    }
    await this.fileOps; // the delivery marks (and a compaction) are written
  }

  /** Stops the senders and closes the outbox; undelivered events stay for the next open(). Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.abort.abort();
    await this.fileOps;
    await this.fh.sync().catch(() => {});
    await this.fh.close();
    this.unlock();
  }
}
