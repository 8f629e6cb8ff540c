// The pending stale notices of every watcher, kept live for the whole page.
//
// The staleNotices subscription (no watcher: every watcher's notices; includeClosed)
// first sends every notice pending now, then each notice as it opens (NTC-5, NTC-7),
// and, once per closed notice, the notice again with closed: true when it is
// acknowledged by any client or its cursor is removed: the notice leaves every
// dashboard at once. It is sent again after each reconnection; reconcile() then drops
// what was closed while the page was offline by re-reading pendingNotices of every
// watcher on the list. The database is the truth; the subscription is the fast path.
//
// Acknowledge always names the notice exactly (watcher, target, target agent and its
// notifiedVersion, NTC-3, acknowledgeNotices): a notice that was replaced meanwhile is
// not acknowledged by a stale click, and the answer says so. An acknowledgement that cannot reach the server is queued (and kept
// in localStorage across a reload) and sent when the server answers again; its card
// says so until then.

import { gql, NOTICE_FIELDS, NetworkError, GraphQLRequestError } from './gql.js';
import { throttle } from './dom.js';

const RECONCILE_EVERY_MS = 30000;
const FLUSH_EVERY_MS = 2000;
const QUEUE_KEY = 'awareness.ackQueue';

/** pairKey identifies a (watcher, target) cursor: at most one notice is pending on it. */
export function pairKey(n) {
  return `${n.watcher}\u0000${n.targetAgentId}\u0000${n.target}`;
}

/** noticeRef is the exact name of a notice for ackNotices(notices:). */
export function noticeRef(n) {
  return { target: n.target, targetAgentId: n.targetAgentId, notifiedVersion: n.notifiedVersion };
}

// acknowledgeNotices answers per named notice (NTC-3): acknowledged (with its follow-up),
// alreadyAcknowledged or superseded (with the pair's pending notice), notPending.
const ACK_EXACT = `mutation Acknowledge($watcher: String!, $notices: [NoticeRef!]!) {
  acknowledgeNotices(watcher: $watcher, notices: $notices) {
    target targetAgentId notifiedVersion outcome
    followUp { ${NOTICE_FIELDS} } pending { ${NOTICE_FIELDS} } } }`;

/** followUps are the notices an acknowledgement's answer opened or left pending. */
function followUps(acks) {
  return acks.flatMap((a) => [a.followUp, a.pending]).filter(Boolean);
}

export class NoticeStore extends EventTarget {
  constructor(live) {
    super();
    this.live = live;
    this.byPair = new Map();
    // queued: pairKey → notice whose acknowledgement waits for the server.
    this.queued = new Map();
    this.error = null;
    this.ready = false;
    this.reconcileSoon = throttle(() => this.reconcile(), 1000);
    this.flushing = null;
    try {
      for (const n of JSON.parse(localStorage.getItem(QUEUE_KEY) || '[]')) this.queued.set(pairKey(n), n);
    } catch { /* nothing queued */ }
  }

  /**
   * start subscribes to every watcher's notices: an admin's are every watcher's, an
   * agent-role token's those of its own agent's watchers (the server narrows the
   * stream, CLT-1). A refused subscription is said by the notice panels (error, the
   * 'failed' event) and tried again after a new token.
   */
  start(auth) {
    this.subscribe();
    if (auth) auth.addEventListener('token', () => { if (this.error) this.subscribe(); });
    this.live.onReconnect(() => this.reconcileSoon());
    this.live.onState((s) => {
      if (s.status === 'connected') { this.ready = true; this.flush(); }
      this.changed();
    });
    this.timer = setInterval(() => this.reconcile(), RECONCILE_EVERY_MS);
    this.flushTimer = setInterval(() => { if (this.queued.size) this.flush(); }, FLUSH_EVERY_MS);
  }

  subscribe() {
    if (this.unsubscribe) this.unsubscribe();
    this.error = null;
    this.unsubscribe = this.live.subscribe(`subscription { staleNotices(includeClosed: true) { ${NOTICE_FIELDS} closed } }`, {}, {
      next: (d) => {
        this.ready = true;
        if (this.error) { this.error = null; this.dispatchEvent(new Event('failed')); }
        if (d.staleNotices.closed) this.close(d.staleNotices); else this.upsert(d.staleNotices, true);
      },
      error: (errs) => {
        this.error = errs;
        this.dispatchEvent(new Event('failed'));
        this.changed();
      },
    });
  }

  /**
   * known reports whether the list is the server's: the feed is live and was not
   * refused. An empty list that is not known must never read as "nothing pending".
   */
  known() {
    return !this.error && this.ready && this.live.state.status === 'connected';
  }

  /** list returns the pending notices, newest first. */
  list() {
    return [...this.byPair.values()].sort((a, b) => (a.openedAt < b.openedAt ? 1 : a.openedAt > b.openedAt ? -1 : 0));
  }

  /** forWatcher returns the pending notices of one watcher. */
  forWatcher(watcher) {
    return this.list().filter((n) => n.watcher === watcher);
  }

  /** aboutTarget returns the pending notices about one session: who waits to reconcile it. */
  aboutTarget(agentId, key) {
    return this.list().filter((n) => n.target === key && n.targetAgentId === agentId);
  }

  /** isQueued reports whether n's acknowledgement waits for the server. */
  isQueued(n) {
    const q = this.queued.get(pairKey(n));
    return !!q && q.notifiedVersion === n.notifiedVersion;
  }

  upsert(n, live = false) {
    const key = pairKey(n);
    const old = this.byPair.get(key);
    if (old && old.notifiedVersion > n.notifiedVersion) return;
    const fresh = live && (!old || old.notifiedVersion !== n.notifiedVersion);
    this.byPair.set(key, { ...n, fresh, receivedAt: Date.now(), currentMaterial: Math.max(n.materialVersion, old ? old.currentMaterial : 0) });
    this.changed();
  }

  /** close drops the notice a closed item names (not a newer one on the same pair). */
  close(n) {
    const key = pairKey(n);
    const old = this.byPair.get(key);
    if (old && old.notifiedVersion <= n.notifiedVersion) this.byPair.delete(key);
    const q = this.queued.get(key);
    if (q && q.notifiedVersion <= n.notifiedVersion) { this.queued.delete(key); this.saveQueue(); }
    this.changed();
  }

  changed() {
    this.dispatchEvent(new Event('change'));
  }

  saveQueue() {
    try { localStorage.setItem(QUEUE_KEY, JSON.stringify([...this.queued.values()])); } catch { /* memory only */ }
  }

  /**
   * ack acknowledges exactly these notices of one watcher and returns
   * {follow, acks, queued}: the follow-up notices the server opened (NTC-3: events
   * after the notice opened), the answer per notice (acks: outcome, pending), or queued
   * true when the server cannot be reached (the acknowledgement is then sent when it
   * is back). Other errors reject.
   */
  async ack(watcher, list) {
    const ns = list.filter((n) => n.watcher === watcher);
    if (!ns.length) return { follow: [], acks: [], queued: false };
    let data;
    try {
      data = await gql(ACK_EXACT, { watcher, notices: ns.map(noticeRef) });
    } catch (err) {
      if (!(err instanceof NetworkError)) throw err;
      for (const n of ns) this.queued.set(pairKey(n), n);
      this.saveQueue();
      this.changed();
      return { follow: [], acks: [], queued: true };
    }
    const acks = data.acknowledgeNotices;
    this.applyAck(ns, followUps(acks));
    return { follow: acks.filter((a) => a.followUp).map((a) => a.followUp), acks, queued: false };
  }

  applyAck(ns, follow) {
    for (const n of ns) {
      const k = pairKey(n);
      const cur = this.byPair.get(k);
      if (cur && cur.notifiedVersion <= n.notifiedVersion) this.byPair.delete(k);
      const q = this.queued.get(k);
      if (q && q.notifiedVersion <= n.notifiedVersion) this.queued.delete(k);
    }
    this.saveQueue();
    for (const f of follow) this.upsert(f, true);
    this.changed();
  }

  /** cancelQueued forgets a queued acknowledgement. */
  cancelQueued(n) {
    this.queued.delete(pairKey(n));
    this.saveQueue();
    this.changed();
  }

  /**
   * flush sends the queued acknowledgements, one request per watcher. A notice that
   * was replaced meanwhile is not acknowledged (the exact form); the server's answer
   * then reopens nothing and reconcile() shows the newer notice.
   */
  flush() {
    if (this.flushing || !this.queued.size) return this.flushing;
    this.flushing = (async () => {
      try {
        const byWatcher = new Map();
        for (const n of this.queued.values()) {
          if (!byWatcher.has(n.watcher)) byWatcher.set(n.watcher, []);
          byWatcher.get(n.watcher).push(n);
        }
        for (const [watcher, ns] of byWatcher) {
          let data;
          try {
            data = await gql(ACK_EXACT, { watcher, notices: ns.map(noticeRef) });
          } catch (err) {
            if (err instanceof NetworkError) return; // still offline: next time
            for (const n of ns) this.queued.delete(pairKey(n));
            this.saveQueue();
            this.changed();
            this.dispatchEvent(new CustomEvent('flushed', { detail: { watcher, notices: ns, error: err } }));
            continue;
          }
          const acks = data.acknowledgeNotices;
          this.applyAck(ns, followUps(acks));
          this.dispatchEvent(new CustomEvent('flushed', { detail: { watcher, notices: ns, acks, follow: acks.filter((a) => a.followUp).map((a) => a.followUp) } }));
        }
      } finally {
        this.flushing = null;
      }
    })();
    return this.flushing;
  }

  /**
   * load is the notice panels' load: the list is only as good as the live feed, so it
   * fails while the connection is down (or was refused), and otherwise re-reads every
   * listed watcher's pending notices. The first connection is waited for briefly.
   */
  async load() {
    if (this.live.state.status === 'connecting') {
      await new Promise((resolve) => {
        const timer = setTimeout(done, 5000);
        const off = this.live.onState((s) => { if (s.status !== 'connecting') done(); });
        function done() { clearTimeout(timer); off(); resolve(); }
      });
    }
    if (this.error) throw new GraphQLRequestError([this.error].flat(), 200);
    const st = this.live.state.status;
    if (st === 'unauthorised') {
      throw new GraphQLRequestError([{ message: 'the server refused the live connection: it needs a valid access token', extensions: { code: 'UNAUTHENTICATED' } }], 401);
    }
    if (st !== 'connected') throw new NetworkError(new Error('the live connection is down'));
    await this.reconcile(true);
  }

  /**
   * reconcile re-reads pendingNotices of every watcher on the list (one request with
   * aliases): notices closed while offline leave, and M (the material watermark,
   * which moves without a new notice) is refreshed.
   */
  async reconcile(strict = false) {
    const watchers = [...new Set([...this.byPair.values()].map((n) => n.watcher))].slice(0, 100);
    if (!watchers.length) return;
    const vars = {};
    const fields = watchers.map((w, i) => {
      vars[`w${i}`] = w;
      return `p${i}: pendingNotices(watcher: $w${i}) { ${NOTICE_FIELDS} }`;
    });
    const decl = watchers.map((_, i) => `$w${i}: String!`).join(', ');
    const started = Date.now();
    let data;
    try {
      data = await gql(`query Pending(${decl}) { ${fields.join(' ')} }`, vars);
    } catch (err) {
      if (strict) throw err;
      return; // offline: the connection state already says so
    }
    const seen = new Set();
    watchers.forEach((w, i) => {
      for (const n of data[`p${i}`] || []) {
        seen.add(pairKey(n));
        const old = this.byPair.get(pairKey(n));
        if (!old || old.notifiedVersion < n.notifiedVersion) {
          this.upsert(n, false);
        } else if (old.notifiedVersion === n.notifiedVersion) {
          old.currentMaterial = Math.max(old.currentMaterial, n.materialVersion);
        }
      }
    });
    for (const [k, n] of this.byPair) {
      // A notice that arrived after the read started may not be in it yet.
      if (watchers.includes(n.watcher) && !seen.has(k) && n.receivedAt < started) this.byPair.delete(k);
    }
    this.changed();
  }
}
