// The pending stale notices of every watcher, kept live for the whole page.
//
// The staleNotices subscription (no watcher: every watcher's notices) first sends
// every notice pending now, then each notice as it opens (NTC-5, NTC-7); it is sent
// again after each reconnection, so nothing opened while offline is missed. A notice
// leaves the list when it is acknowledged here, and reconcile() drops those another
// client acknowledged (the subscription only announces openings) by re-reading
// pendingNotices of every watcher on the list. The database is the truth; the
// subscription is the fast path.

import { gql, NOTICE_FIELDS } from './gql.js';
import { throttle } from './dom.js';

const RECONCILE_EVERY_MS = 10000;

/** pairKey identifies a (watcher, target) cursor: at most one notice is pending on it. */
export function pairKey(n) {
  return `${n.watcher}\u0000${n.targetAgentId}\u0000${n.target}`;
}

export class NoticeStore extends EventTarget {
  constructor(live) {
    super();
    this.live = live;
    this.byPair = new Map();
    this.error = null;
    this.ready = false;
    this.reconcileSoon = throttle(() => this.reconcile(), 1000);
  }

  start() {
    this.live.subscribe(`subscription { staleNotices { ${NOTICE_FIELDS} } }`, {}, {
      next: (d) => { this.ready = true; this.upsert(d.staleNotices, true); },
      error: (errs) => { this.error = errs; this.changed(); },
    });
    this.live.onReconnect(() => this.reconcileSoon());
    this.live.onState((s) => { if (s.status === 'connected') { this.ready = true; this.changed(); } });
    this.timer = setInterval(() => this.reconcile(), RECONCILE_EVERY_MS);
  }

  /** list returns the pending notices, newest first. */
  list() {
    return [...this.byPair.values()].sort((a, b) => (a.openedAt < b.openedAt ? 1 : a.openedAt > b.openedAt ? -1 : 0));
  }

  /** forWatcher returns the pending notices of one watcher. */
  forWatcher(watcher) {
    return this.list().filter((n) => n.watcher === watcher);
  }

  upsert(n, live = false) {
    const key = pairKey(n);
    const old = this.byPair.get(key);
    if (old && old.notifiedVersion > n.notifiedVersion) return;
    const fresh = live && (!old || old.notifiedVersion !== n.notifiedVersion);
    this.byPair.set(key, { ...n, fresh, receivedAt: Date.now(), currentMaterial: Math.max(n.materialVersion, old ? old.currentMaterial : 0) });
    this.changed();
  }

  changed() {
    this.dispatchEvent(new Event('change'));
  }

  /**
   * ack acknowledges one notice (ackNotices with its target) and returns the follow-up
   * notices the server opened (NTC-3: events that arrived after the notice opened).
   */
  async ack(n) {
    const data = await gql(
      `mutation Ack($watcher: String!, $targets: [String!]) { ackNotices(watcher: $watcher, targets: $targets) { ${NOTICE_FIELDS} } }`,
      { watcher: n.watcher, targets: [n.target] });
    const cur = this.byPair.get(pairKey(n));
    if (cur && cur.notifiedVersion <= n.notifiedVersion) this.byPair.delete(pairKey(n));
    for (const f of data.ackNotices) this.upsert(f, true);
    this.changed();
    return data.ackNotices;
  }

  /** ackAll acknowledges every pending notice of one watcher. */
  async ackAll(watcher) {
    const data = await gql(
      `mutation AckAll($watcher: String!) { ackNotices(watcher: $watcher) { ${NOTICE_FIELDS} } }`,
      { watcher });
    for (const [k, n] of this.byPair) if (n.watcher === watcher) this.byPair.delete(k);
    for (const f of data.ackNotices) this.upsert(f, true);
    this.changed();
    return data.ackNotices;
  }

  /**
   * reconcile re-reads pendingNotices of every watcher on the list (one request with
   * aliases): notices acknowledged elsewhere leave, and M (the material watermark,
   * which moves without a new notice) is refreshed.
   */
  async reconcile() {
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
    } catch {
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
