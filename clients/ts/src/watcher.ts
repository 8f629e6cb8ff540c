// The notice Watcher: staleNotices over graphql-transport-ws (the graphql-ws client),
// with reconnect and backoff, replay de-duplication, drain and exact acknowledgement.
import { EventEmitter } from 'node:events';
import { createClient, type Client as WsClient } from 'graphql-ws';
import WebSocket from 'ws';
import { Client } from './client.js';

/** A stale notice (the GraphQL StaleNotice, NTC-1..7). */
export interface Notice {
  watcher: string;
  target: string;
  targetAgentId: string;
  /** L: where the watcher reconciles from. */
  changesSince: number;
  /** N: what acknowledging this notice covers. */
  notifiedVersion: number;
  materialVersion: number;
  /** The exact line to put into the watcher's prompt (NTC-1). */
  text: string;
  /** Run the watcher's turn now (a main session, NTC-6). */
  wake: boolean;
  openedAt: string;
  /** Set on the item that tells the notice was acknowledged or removed. */
  closed?: boolean;
}

export interface WatcherOptions {
  /** Bounds of the reconnect backoff (exponential with jitter; defaults 100 ms and 10 s). */
  minBackoffMs?: number;
  maxBackoffMs?: number;
}

const NOTICE = 'watcher target targetAgentId changesSince notifiedVersion materialVersion text wake openedAt';
const subscription = `subscription($w: String) { staleNotices(watcher: $w, includeClosed: true) { ${NOTICE} closed } }`;
const ackMutation = `mutation($w: String!, $n: [NoticeRef!]) { ackNotices(watcher: $w, notices: $n) { ${NOTICE} closed } }`;
const pendingQuery = `query($w: String!) { pendingNotices(watcher: $w) { watcher target targetAgentId notifiedVersion } }`;

const key = (n: { watcher: string; targetAgentId: string; target: string }) => `${n.watcher}\0${n.targetAgentId}\0${n.target}`;

/**
 * Follows the stale notices of one or more watcher sessions and keeps those not yet
 * consumed: a replayed notice is handed out once; one acknowledged elsewhere or
 * removed is dropped (its closed item, or the pendingNotices check after each
 * reconnect); drain() hands out what goes into the prompt now and ack() acknowledges
 * exactly those (NTC-3). Events: 'notice' when something can be drained, 'change'
 * (notice) for each item that opened or closed a notice, 'connected', 'error' (fatal;
 * also in the error property).
 */
export class Watcher extends EventEmitter {
  private ws: WsClient;
  private open = new Map<string, { n: Notice; confirmed: boolean }>();
  private drained = new Map<string, number>();
  private unsubscribes: (() => void)[] = [];
  private closedFlag = false;
  private connectedOnce: Promise<void>;
  private markConnected!: () => void;
  /** Replayed items dropped so far. */
  duplicates = 0;
  /** The fatal error that stopped the stream (a refused token), if any. */
  error: unknown = null;

  constructor(private readonly client: Client, readonly watchers: string[], opts: WatcherOptions = {}) {
    super();
    if (!watchers.length) throw new Error('awareness watcher: name at least one watcher session');
    const min = opts.minBackoffMs ?? 100, max = Math.max(opts.maxBackoffMs ?? 10_000, min);
    this.connectedOnce = new Promise((res) => { this.markConnected = res; });
    this.ws = createClient({
      url: client.wsUrl,
      webSocketImpl: WebSocket,
      connectionParams: client.authorization ? { Authorization: client.authorization } : {},
      lazy: false,
      retryAttempts: Infinity,
      shouldRetry: () => !this.closedFlag,
      retryWait: async (retries) => {
        const d = Math.min(min * 2 ** retries, max);
        await new Promise((r) => setTimeout(r, d + Math.random() * d / 2));
      },
      on: {
        connected: () => {
          for (const t of this.open.values()) t.confirmed = false;
          this.markConnected();
          this.emit('connected');
          void this.confirm();
        },
      },
    });
    for (const w of watchers) this.subscribe(w);
  }

  private subscribe(watcher: string) {
    const un = this.ws.subscribe<{ staleNotices: Notice }>({ query: subscription, variables: { w: watcher } }, {
      next: (r) => {
        if (r.errors?.length) { this.client.log.warn(`awareness watcher: ${JSON.stringify(r.errors)}`); return; }
        if (r.data?.staleNotices) this.accept(r.data.staleNotices, true);
      },
      error: (e: any) => this.ended(watcher, e),
      complete: () => this.ended(watcher, null),
    });
    this.unsubscribes.push(un);
  }

  /** The service ended one subscription (UNAVAILABLE at shutdown …): subscribe again, unless refused for good. */
  private ended(watcher: string, e: any) {
    if (this.closedFlag) return;
    const code = Array.isArray(e) ? e[0]?.extensions?.code : undefined;
    const closeCode = e && typeof e === 'object' && 'code' in e ? (e as { code: number }).code : 0;
    if ((code && code !== 'UNAVAILABLE' && code !== 'INTERNAL') || closeCode === 4401 || closeCode === 4403) {
      this.error = e;
      this.client.log.error(`awareness watcher: notice stream refused: ${JSON.stringify(e)}`);
      if (this.listenerCount('error')) this.emit('error', e);
      return;
    }
    setTimeout(() => { if (!this.closedFlag) this.subscribe(watcher); }, 100);
  }

  /** Resolves once the stream is up. */
  waitConnected(): Promise<void> { return this.connectedOnce; }

  private sorted(watchers: string[]): Notice[] {
    return [...this.open.values()].map((t) => t.n)
      .filter((n) => !watchers.length || watchers.includes(n.watcher))
      .sort((a, b) => (a.openedAt < b.openedAt ? -1 : a.openedAt > b.openedAt ? 1 : a.target < b.target ? -1 : 1));
  }

  /** The notices drain() would hand out now (of the given watchers, or all). */
  pending(...watchers: string[]): Notice[] { return this.sorted(watchers); }

  /** Hands out the notices to put into the prompt now (of the given watchers, or all), each once. */
  drain(...watchers: string[]): Notice[] {
    const out = this.sorted(watchers);
    for (const n of out) {
      this.open.delete(key(n));
      this.drained.set(key(n), n.notifiedVersion);
    }
    return out;
  }

  /** Acknowledges exactly the drained notices (NTC-3); returns the follow-ups opened (also kept for the next drain). */
  async ack(drained: Notice[]): Promise<Notice[]> {
    const byWatcher = new Map<string, { target: string; targetAgentId: string; notifiedVersion: number }[]>();
    for (const n of drained) {
      const refs = byWatcher.get(n.watcher) ?? [];
      refs.push({ target: n.target, targetAgentId: n.targetAgentId, notifiedVersion: n.notifiedVersion });
      byWatcher.set(n.watcher, refs);
    }
    const followUps: Notice[] = [];
    for (const [w, refs] of byWatcher) {
      const data = await this.client.request<{ ackNotices: Notice[] }>(ackMutation, { w, n: refs });
      followUps.push(...data.ackNotices);
    }
    for (const n of drained) if (this.drained.get(key(n)) === n.notifiedVersion) this.drained.delete(key(n));
    for (const n of followUps) this.accept(n, true);
    return followUps;
  }

  private accept(n: Notice, fresh: boolean) {
    const k = key(n);
    if (n.closed) {
      const t = this.open.get(k);
      if (t && t.n.notifiedVersion <= n.notifiedVersion) this.open.delete(k);
      const v = this.drained.get(k);
      if (v !== undefined && v <= n.notifiedVersion) this.drained.delete(k);
      this.emit('change', n);
      return;
    }
    const v = this.drained.get(k);
    if (v !== undefined && v >= n.notifiedVersion) { this.duplicates++; return; }
    const t = this.open.get(k);
    if (t && t.n.notifiedVersion >= n.notifiedVersion) { t.confirmed ||= fresh; this.duplicates++; return; }
    this.drained.delete(k);
    this.open.set(k, { n, confirmed: fresh });
    this.emit('change', n);
    this.emit('notice');
  }

  /** Drops the kept notices the service no longer has pending (closed while the stream was down). */
  private async confirm() {
    const pending = new Map<string, number>();
    const asked = new Set<string>();
    for (const w of this.watchers) {
      try {
        const data = await this.client.request<{ pendingNotices: Notice[] }>(pendingQuery, { w });
        asked.add(w);
        for (const n of data.pendingNotices) pending.set(key(n), n.notifiedVersion);
      } catch (e) {
        this.client.log.debug(`awareness watcher: confirm ${w}: ${e}`);
      }
    }
    for (const [k, t] of this.open) {
      if (asked.has(t.n.watcher) && !t.confirmed && pending.get(k) !== t.n.notifiedVersion) this.open.delete(k);
    }
    for (const [k, v] of this.drained) {
      if (asked.has(k.split('\0')[0]) && pending.get(k) !== v) this.drained.delete(k);
    }
  }

  /** Stops the stream; notices not acknowledged stay pending in the service. */
  async close(): Promise<void> {
    this.closedFlag = true;
    for (const un of this.unsubscribes.splice(0)) un();
    await this.ws.dispose();
  }
}
