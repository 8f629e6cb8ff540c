// Components shared by several views: the notice card and list, the upstream links
// panel, the activity chart and the event filter.

import { h, fill, append, sessionLink, sessionHref, watcherHref, timeEl, toast, agentOf, throttle, kindClass, keyText } from '../dom.js';
import { gql, errorText } from '../gql.js';
import { eventKinds, loadKinds, setKinds, colourOf } from '../vocab.js';
import { pairKey } from '../notices.js';

/**
 * noticeDigest reads the digest of notice n (DIG-1) when asked for: the events of
 * (changesSince, notifiedVersion] counted by the service, without content. The feed
 * never selects it (a read of the log per notice).
 */
export async function noticeDigest(n) {
  const d = await gql(`query($w: String!) { pendingNotices(watcher: $w) { target targetAgentId notifiedVersion
    digest { byKind { kind count } byActorType { actorType count } humanEvents lastHumanChannel latestVersion counted pruned } } }`, { w: n.watcher });
  const p = d.pendingNotices.find((x) => x.target === n.target && x.targetAgentId === n.targetAgentId && x.notifiedVersion === n.notifiedVersion);
  return p ? p.digest : null;
}

/** digestText is a digest in one line: "2 events: human_direct_message 1, goal_changed 1; human 1, agent 1; last human channel telegram". */
export function digestText(d) {
  if (!d) return 'This notice is no longer pending.';
  const kinds = d.byKind.map((k) => `${k.kind} ${k.count}`).join(', ');
  const actors = d.byActorType.map((a) => `${a.actorType} ${a.count}`).join(', ');
  let s = `${d.counted} event${d.counted === 1 ? '' : 's'} up to ${d.latestVersion}: ${kinds || 'none retained'}; ${actors || '—'}`;
  if (d.lastHumanChannel) s += `; last human channel ${d.lastHumanChannel}`;
  if (d.pruned) s += `; ${d.pruned} pruned before it was read`;
  return s;
}

/** copyText puts text on the clipboard (the Clipboard API, else a selected textarea). */
export async function copyText(text) {
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return true;
    }
  } catch { /* fall back below */ }
  const ta = h('textarea', { readonly: true, style: 'position:fixed;left:-9999px;top:0' });
  ta.value = text;
  document.body.append(ta);
  ta.select();
  let ok = false;
  try { ok = document.execCommand('copy'); } catch { ok = false; }
  ta.remove();
  return ok;
}

/** ackToast tells what an acknowledgement did, never more. */
export function ackToast(res, ns) {
  if (res.queued) {
    toast(`The server cannot be reached: the acknowledgement of ${ns.length === 1 ? ns[0].target : `${ns.length} notices`} is queued and sent when it is back.`, 'warn');
    return;
  }
  const acks = res.acks || [];
  const done = acks.length ? acks.filter((a) => a.outcome === 'acknowledged').length : ns.length;
  const others = acks.filter((a) => a.outcome !== 'acknowledged');
  const f = res.follow.length;
  const parts = [];
  if (done) parts.push(ns.length === 1 && !others.length ? `Acknowledged ${ns[0].target} for ${ns[0].watcher}.` : `Acknowledged ${done} notice${done === 1 ? '' : 's'}.`);
  if (f) parts.push(`${f} follow-up notice${f === 1 ? '' : 's'} opened for changes after the acknowledged one.`);
  for (const a of others) {
    parts.push({
      alreadyAcknowledged: `${a.target} (N=${a.notifiedVersion}) had been acknowledged already.`,
      superseded: `${a.target} was not acknowledged: a newer notice${a.pending ? ` (N=${a.pending.notifiedVersion})` : ''} replaced it and is shown now.`,
      notPending: `${a.target} (N=${a.notifiedVersion}) was not pending any more.`,
    }[a.outcome] || `${a.target}: ${a.outcome}.`);
  }
  toast(parts.join(' '), others.length ? 'warn' : '');
}

/**
 * noticeCard renders one pending stale notice: watcher and target, the exact notice
 * text (NTC-1) with a copy button, the wake flag (NTC-6), L/N/M, and Reconcile and
 * Acknowledge (NTC-3, the exact form). A queued acknowledgement shows as such.
 * opts.select adds a checkbox (bulk acknowledge).
 */
export function noticeCard(n, store, opts = {}) {
  const moved = n.currentMaterial > n.materialVersion;
  const queued = store.isQueued(n);
  const ackBtn = h('button', {
    type: 'button', class: queued ? 'ack' : 'primary ack',
    'aria-label': queued ? `Cancel the queued acknowledgement of ${n.watcher} about ${n.target}` : `Acknowledge the notice of ${n.watcher} about ${n.target}`,
  }, queued ? 'Cancel queued' : 'Acknowledge');
  const copyBtn = h('button', { type: 'button', class: 'copy', 'aria-label': `Copy the notice text of ${n.watcher} about ${n.target}` }, 'Copy text');
  const digestBtn = h('button', { type: 'button', class: 'digest', 'aria-label': `What changed for ${n.watcher} about ${n.target}` }, 'What changed');
  const digestOut = h('p', { class: 'notice-digest small muted', 'aria-live': 'polite', dataset: { digest: '' } });
  const box = opts.select ? h('input', { type: 'checkbox', class: 'pick', 'aria-label': `Select the notice about ${n.target}` }) : null;
  const card = h('article', {
    class: `notice${n.fresh ? ' fresh' : ''}${queued ? ' queued' : ''}`,
    dataset: { watcher: n.watcher, target: n.target, targetAgent: n.targetAgentId, version: n.notifiedVersion, queued: queued ? '1' : null },
    'aria-label': `Notice for ${n.watcher} about ${n.target}`,
  },
  h('div', { class: 'notice-head' },
    box,
    h('a', { class: 'key', href: watcherHref(n.watcher), title: `Everything ${n.watcher} waits on` }, n.watcher),
    h('span', { class: 'arrow', 'aria-hidden': 'true' }, '→'),
    h('span', { class: 'visually-hidden' }, 'is stale about'),
    sessionLink(n.target, n.targetAgentId),
    n.wake
      ? h('span', { class: 'badge wake', title: 'Main-session watcher: the gateway should run a turn now (NTC-6)' }, 'wake')
      : h('span', { class: 'badge', title: 'Sub-agent watcher: it sees the notice on its next turn (NTC-6)' }, 'no wake'),
    generationBadge(n),
    queued ? h('span', { class: 'badge info queued-badge', role: 'status' }, 'acknowledgement queued: sent when the server is back') : null),
  h('pre', { class: 'notice-text', 'aria-label': 'Notice text' }, n.text),
  digestOut,
  h('dl', { class: 'lnm' },
    h('div', { title: 'L: last acknowledged; reconcile with changesSince L' }, h('dt', null, 'L'), h('dd', null, n.changesSince)),
    h('div', { title: 'N: the frozen watermark this notice covers' }, h('dt', null, 'N'), h('dd', null, n.notifiedVersion)),
    h('div', { title: moved ? `M: ${n.materialVersion} when the notice opened, ${n.currentMaterial} now` : 'M: the latest material change' },
      h('dt', null, 'M'),
      h('dd', { class: moved ? 'moved' : null }, moved ? `${n.currentMaterial}` : n.materialVersion))),
  h('div', { class: 'notice-foot' },
    h('span', null, 'opened ', timeEl(n.openedAt)),
    h('span', { class: 'actions' },
      digestBtn,
      copyBtn,
      opts.noReconcile ? null : h('a', { class: 'btn reconcile', href: sessionHref(n.targetAgentId, n.target, { since: n.changesSince, watcher: n.watcher }) }, 'Reconcile'),
      ackBtn)));
  if (n.fresh) setTimeout(() => card.classList.remove('fresh'), 2500);
  digestBtn.addEventListener('click', async () => {
    try {
      fill(digestOut, digestText(await noticeDigest(n)));
    } catch (err) {
      fill(digestOut, `The digest could not be read: ${errorText(err)}`);
    }
  });
  copyBtn.addEventListener('click', async () => {
    const ok = await copyText(n.text);
    fill(copyBtn, ok ? 'Copied' : 'Copy failed');
    copyBtn.dataset.copied = ok ? '1' : '0';
    setTimeout(() => { fill(copyBtn, 'Copy text'); delete copyBtn.dataset.copied; }, 2000);
  });
  ackBtn.addEventListener('click', async () => {
    if (ackBtn.getAttribute('aria-disabled') === 'true') return;
    const container = card.parentElement;
    const index = container ? [...container.children].indexOf(card) : -1;
    const hadFocus = card.contains(document.activeElement);
    if (queued) {
      store.cancelQueued(n);
      toast(`The queued acknowledgement of ${n.target} for ${n.watcher} is cancelled.`);
      if (hadFocus) refocus(container, index);
      return;
    }
    // aria-disabled, not disabled: a disabled button drops the keyboard focus to <body>.
    ackBtn.setAttribute('aria-disabled', 'true');
    card.classList.add('leaving');
    try {
      ackToast(await store.ack(n.watcher, [n]), [n]);
    } catch (err) {
      toast(`Acknowledge failed: ${errorText(err)}`, 'bad');
    } finally {
      card.classList.remove('leaving');
      ackBtn.removeAttribute('aria-disabled');
    }
    if (hadFocus) refocus(container, index);
  });
  return card;
}

/**
 * refocus keeps a keyboard user in place after a card changed or left: the card now at
 * index in container (its Acknowledge button), else the panel's heading.
 */
export function refocus(container, index) {
  if (!container || !document.contains(container)) return;
  if (container.contains(document.activeElement) && document.activeElement !== document.body) return;
  const cards = [...container.querySelectorAll(':scope > .notice')];
  const card = cards[Math.min(Math.max(index, 0), cards.length - 1)];
  const target = (card && card.querySelector('button.ack'))
    || (container.closest('section') && container.closest('section').querySelector('h2'));
  if (target) {
    if (!target.hasAttribute('tabindex') && target.tagName === 'H2') target.setAttribute('tabindex', '-1');
    target.focus();
  }
}

/**
 * noticeList keeps container showing list() as notice cards, reusing unchanged cards
 * (so focus and selection stay) and keeping the keyboard focus in the list when the
 * focused card leaves. empty() gives the content shown when nothing is pending.
 */
export function noticeList(container, store, list, empty, opts = {}) {
  const cards = new Map(); // pairKey → {n, el, queued}
  return () => {
    const shown = list();
    const hadFocus = container.contains(document.activeElement);
    const focusIndex = hadFocus ? [...container.children].findIndex((c) => c.contains(document.activeElement)) : -1;
    const next = new Map();
    const els = shown.map((n) => {
      const k = pairKey(n);
      const old = cards.get(k);
      const queued = store.isQueued(n);
      const same = old && old.n.notifiedVersion === n.notifiedVersion && old.n.currentMaterial === n.currentMaterial && old.queued === queued;
      const el = same ? old.el : noticeCard(n, store, opts);
      next.set(k, { n, el, queued });
      return el;
    });
    cards.clear();
    for (const [k, v] of next) cards.set(k, v);
    if (!els.length) {
      fill(container, empty());
    } else {
      const same = els.length === container.children.length && els.every((el, i) => container.children[i] === el);
      if (!same) fill(container, els);
    }
    if (hadFocus && !container.contains(document.activeElement)) refocus(container, focusIndex);
    return shown;
  };
}

/**
 * noNotices is the empty state of a notice list, with how to get a first notice. When
 * the feed failed or was refused it is empty: the panel's alert says why, and a
 * refusal must never read as "nothing pending".
 */
export function noNotices(store, auth, text) {
  if (!store.known() || (auth && auth.state === 'needed')) {
    return h('div', { class: 'empty', dataset: { noticesUnknown: '' } },
      store.error || (auth && auth.state === 'needed') ? null : 'Not known until the live feed is back.');
  }
  return h('div', { class: 'empty', dataset: { emptyNotices: '' } }, text);
}

/**
 * noticePanel registers a panel whose content is the notice feed: it loads with the
 * feed (notices.load) and loads again when the feed is refused or comes back, so that
 * its state is the feed's (a refused feed is never "live, nothing pending").
 */
export function noticePanel(panels, notices, section, head, what, cleanups) {
  const p = panels.add(section, head, () => notices.load(), what);
  const again = () => p.run();
  notices.addEventListener('failed', again);
  cleanups.push(() => { notices.removeEventListener('failed', again); p.remove(); });
  return p;
}

/**
 * upstreamPanel lists adopted sessions' upstream links and their health (UPS-*),
 * all of them or those of one session: marker, misses, last check and blocked reason.
 * It is a live panel: it reloads when any session logs a change (a check that finds
 * a missing prompt records upstream_missing) and every 15 s (a check that finds
 * nothing logs nothing).
 */
export function upstreamPanel({ agentId, sessionKey, panels, bus, auth, cleanups }) {
  const body = h('div', null, h('p', { class: 'skeleton' }, 'Loading…'));
  const head = h('div', { class: 'panel-head' },
    h('h2', { id: 'upstream-h' }, 'Upstream links'),
    h('span', { class: 'hint' }, 'adopted sessions and their health'));
  const panel = h('section', { class: 'panel', id: 'upstream', 'aria-labelledby': 'upstream-h' }, head, body);
  const load = async () => {
    const d = await gql(`query Links($agentId: String) { upstreamLinks(agentId: $agentId) {
        sessionKey agentId catalogId threadId marker consecutiveMisses lastCheckedAt blockedReason } }`,
      { agentId: agentId || null });
    let links = d.upstreamLinks;
    if (sessionKey) links = links.filter((l) => l.sessionKey === sessionKey);
    if (!links.length) {
      fill(body, h('p', { class: 'empty', dataset: { upstreamEmpty: '' } },
        sessionKey ? 'This session is not adopted from a catalog.' : 'No adopted sessions. adoptSession links a session to its upstream transcript; its health shows here.'));
      return;
    }
    fill(body, h('div', { class: 'table-wrap' }, h('table', { class: 'stacked upstream' },
      h('thead', null, h('tr', null,
        h('th', null, 'Session'), h('th', null, 'Health'),
        h('th', { class: 'num' }, 'Marker'), h('th', null, 'Checked'))),
      h('tbody', null, links.map((l) => h('tr', { dataset: { key: l.sessionKey } },
        h('td', null, sessionLink(l.sessionKey, l.agentId),
          h('div', { class: 'small muted mono wrap' }, l.catalogId, ' / ', l.threadId)),
        h('td', null, linkHealth(l)),
        h('td', { class: 'num', 'data-label': 'marker' }, `${l.marker} B`),
        h('td', { 'data-label': 'checked', dataset: { checked: l.lastCheckedAt ? '1' : '0' } }, l.lastCheckedAt ? timeEl(l.lastCheckedAt) : 'not yet')))))));
  };
  const p = panels.add(panel, head, load, 'the upstream links');
  const soon = throttle(() => p.run(), 1500);
  const onEvent = () => soon();
  bus.addEventListener('event', onEvent);
  const timer = setInterval(() => p.run(), 15000);
  cleanups.push(() => { bus.removeEventListener('event', onEvent); soon.cancel(); clearInterval(timer); p.remove(); });
  return { el: panel, reload: p.run };
}

function linkHealth(l) {
  if (l.blockedReason) return h('span', { class: 'badge bad wrap', title: l.blockedReason }, 'blocked: ', l.blockedReason);
  if (l.consecutiveMisses > 0) return h('span', { class: 'badge wake' }, `missing ${l.consecutiveMisses}/3`);
  return h('span', { class: 'badge ok' }, 'healthy');
}

/**
 * generationBadge shows the generations of a notice's pair (LIF-2) once either session
 * was reset (a new incarnation): the target's, then the watcher's. Nothing for a pair
 * still in its first generations.
 */
export function generationBadge(n) {
  const t = n.targetGeneration ?? 1, w = n.watcherGeneration ?? 1;
  if (t <= 1 && w <= 1) return null;
  return h('span', {
    class: 'badge generation',
    title: `Generations (LIF-2): ${n.target} is in its incarnation ${t}, ${n.watcher} in its incarnation ${w}; one more per reset`,
  }, `gen ${t}/${w}`);
}

// The chart's time ranges: the window in minutes and the width of one bar. Wider
// windows fold the per-minute buckets of the queries into wider bars.
export const CHART_RANGES = [
  { id: '15m', label: 'last 15 min', minutes: 15, bar: 1 },
  { id: '1h', label: 'last hour', minutes: 60, bar: 1 },
  { id: '6h', label: 'last 6 hours', minutes: 360, bar: 5 },
  { id: '24h', label: 'last 24 hours', minutes: 1440, bar: 20 },
];
const RANGE_KEY = 'awareness.chartRange';

function chartRange() {
  let id = '1h';
  try { id = localStorage.getItem(RANGE_KEY) || id; } catch { /* default */ }
  return CHART_RANGES.find((r) => r.id === id) || CHART_RANGES[1];
}

/**
 * activityChart is the "activity at a glance" panel: events per bar by kind over a
 * chosen time range (15 min to 24 h; the activity query), stacked bars drawn as SVG,
 * notices opened and acknowledged marked above them (noticeActivity), with a legend of
 * the totals. The range is kept in localStorage. It is live: it reloads when an event
 * is logged, when a notice opens or closes, and as the minutes pass.
 */
export function activityChart({ sessionKey, agentId, panels, bus, notices, cleanups, scope = 'all sessions' }) {
  let range = chartRange();
  const body = h('div', { class: 'chart-body' }, h('p', { class: 'skeleton' }, 'Loading…'));
  const select = h('select', { id: 'chart-range', 'aria-label': 'Time range of the chart' },
    CHART_RANGES.map((r) => h('option', { value: r.id, selected: r.id === range.id }, r.label)));
  const hint = h('span', { class: 'hint' });
  const head = h('div', { class: 'panel-head' }, h('h2', { id: 'chart-h' }, 'Activity'));
  const tools = h('div', { class: 'chart-tools' }, hint, select);
  const panel = h('section', { class: 'panel', id: 'activity-chart', 'aria-labelledby': 'chart-h' }, head, tools, body);
  const setHint = () => fill(hint, `${sessionKey ? 'this session' : scope} · events per ${range.bar === 1 ? 'minute' : `${range.bar} min`}`);
  setHint();
  const load = async () => {
    const r = range;
    const d = await gql(`query Activity($key: String, $agentId: String, $since: Int) {
      eventKinds { kind role }
      activity(sessionKey: $key, agentId: $agentId, sinceMinutes: $since) { minute kind count }
      noticeActivity(sessionKey: $key, agentId: $agentId, sinceMinutes: $since) { minute opened acknowledged } }`,
    { key: sessionKey || null, agentId: sessionKey ? agentId : null, since: r.minutes });
    if (r !== range) return; // the range changed meanwhile: its own load draws
    setKinds(d.eventKinds);
    drawChart(body, d.activity, d.noticeActivity, !!sessionKey, r);
    panel.dataset.drawn = r.id;
  };
  const p = panels.add(panel, head, load, 'the activity');
  select.addEventListener('change', () => {
    range = CHART_RANGES.find((r) => r.id === select.value) || range;
    try { localStorage.setItem(RANGE_KEY, range.id); } catch { /* this page only */ }
    panel.dataset.range = range.id;
    setHint();
    p.run();
  });
  panel.dataset.range = range.id;
  const soon = throttle(() => p.run(), 1500);
  const onEvent = () => soon();
  bus.addEventListener('event', onEvent);
  // An acknowledgement logs no event: the notice feed's changes redraw the marks.
  notices.addEventListener('change', onEvent);
  const timer = setInterval(() => p.run(), 30000); // the window slides
  cleanups.push(() => {
    bus.removeEventListener('event', onEvent); notices.removeEventListener('change', onEvent);
    soon.cancel(); clearInterval(timer); p.remove();
  });
  return panel;
}

function drawChart(body, buckets, noticeBuckets, oneSession, range) {
  const NS = 'http://www.w3.org/2000/svg';
  const svg = (tag, attrs, ...kids) => {
    const el = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v != null) el.setAttribute(k, String(v));
    for (const c of kids) if (c != null) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return el;
  };
  const COLS = range.minutes / range.bar;
  const nowMin = Math.floor(Date.now() / 60000);
  // The last bar ends with the current minute; bars are range.bar minutes wide.
  const first = nowMin - range.minutes + 1;
  const col = (iso) => Math.floor((Math.floor(Date.parse(iso) / 60000) - first) / range.bar);
  const cols = Array.from({ length: COLS }, () => new Map());
  const totals = new Map();
  for (const b of buckets) {
    const i = col(b.minute);
    if (i < 0 || i >= COLS) continue;
    cols[i].set(b.kind, (cols[i].get(b.kind) || 0) + b.count);
    totals.set(b.kind, (totals.get(b.kind) || 0) + b.count);
  }
  const total = [...totals.values()].reduce((a, b) => a + b, 0);
  const marks = Array.from({ length: COLS }, () => [0, 0]);
  let opened = 0; let acked = 0;
  for (const b of noticeBuckets) {
    const i = col(b.minute);
    if (i < 0 || i >= COLS) continue;
    marks[i][0] += b.opened; marks[i][1] += b.acknowledged;
    opened += b.opened; acked += b.acknowledged;
  }
  if (!total && !opened && !acked) {
    fill(body, h('div', { class: 'empty', dataset: { chartEmpty: '' } },
      `No event in the ${range.label}. `,
      oneSession ? 'Events recorded with recordEvent appear here within a second.'
        : ['Start the demo scene with ', h('code', null, 'awareness serve --demo'), ', or record a first event with the recordEvent mutation (see the playground).']));
    return;
  }
  // The service's kinds in its order, then any kind the buckets name that it did not list.
  const kinds = eventKinds();
  for (const k of totals.keys()) if (!kinds.includes(k)) kinds.push(k);
  const peak = Math.max(1, ...cols.map((c) => [...c.values()].reduce((a, b) => a + b, 0)));
  // One viewBox unit per CSS pixel: bars, marks and labels are never stretched.
  const W = Math.max(280, Math.round(body.clientWidth || 600)); const H = 172; const L = 52; const B = 18; const T = 34;
  const bw = (W - L) / COLS;
  const y = (v) => T + (H - T - B) * (1 - v / peak);
  const time = (d) => d.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' });
  const labelOf = (i) => {
    const from = new Date((first + i * range.bar) * 60000);
    return range.bar === 1 ? time(from) : `${time(from)}–${time(new Date(from.getTime() + range.bar * 60000))}`;
  };
  const g = svg('g', { class: 'bars' });
  cols.forEach((c, i) => {
    let acc = 0;
    const minute = new Date((first + i * range.bar) * 60000);
    for (const kind of kinds) {
      const n = c.get(kind);
      if (!n) continue;
      const y0 = y(acc); const y1 = y(acc + n);
      acc += n;
      g.append(svg('rect', {
        x: (L + i * bw + (bw > 3 ? 1 : 0)).toFixed(1), y: y1.toFixed(1), width: Math.max(1, bw - (bw > 3 ? 2 : 0)).toFixed(1), height: Math.max(1, y0 - y1).toFixed(1),
        class: 'bar', style: `fill: ${colourOf(kind)}`, 'data-kind': kind, 'data-count': n, 'data-minute': minute.toISOString(),
      }, svg('title', null, `${labelOf(i)}: ${n} ${kind}`)));
    }
  });
  // Notice marks above the bars: opened (upper row) and acknowledged (lower row).
  const nm = svg('g', { class: 'notice-marks' },
    svg('text', { x: L - 6, y: 11, 'text-anchor': 'end' }, 'opened'),
    svg('text', { x: L - 6, y: 25, 'text-anchor': 'end' }, 'acked'));
  marks.forEach(([o, a], i) => {
    const cx = (L + i * bw + bw / 2).toFixed(1);
    const minute = new Date((first + i * range.bar) * 60000);
    const r = (n) => Math.min(5, 2.5 + n / 2, Math.max(1.5, bw / 2));
    if (o) nm.append(svg('circle', { cx, cy: 8, r: r(o), class: 'mark opened', 'data-minute': minute.toISOString(), 'data-count': o }, svg('title', null, `${labelOf(i)}: ${o} notice${o === 1 ? '' : 's'} opened`)));
    if (a) nm.append(svg('circle', { cx, cy: 22, r: r(a), class: 'mark acked', 'data-minute': minute.toISOString(), 'data-count': a }, svg('title', null, `${labelOf(i)}: ${a} notice${a === 1 ? '' : 's'} acknowledged`)));
  });
  const span = (m) => (m >= 60 ? `−${m / 60} h` : `−${m} min`);
  const axis = svg('g', { class: 'axis' },
    svg('line', { x1: L, x2: W, y1: H - B, y2: H - B }),
    svg('text', { x: L - 4, y: T + 8, 'text-anchor': 'end' }, peak),
    svg('text', { x: L - 4, y: H - B, 'text-anchor': 'end' }, 0),
    svg('text', { x: L, y: H - 4 }, span(range.minutes)),
    svg('text', { x: L + (W - L) / 2, y: H - 4, 'text-anchor': 'middle' }, span(range.minutes / 2)),
    svg('text', { x: W, y: H - 4, 'text-anchor': 'end' }, 'now'));
  const chart = svg('svg', {
    viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: 'chart', role: 'img',
    'aria-label': `Events over the ${range.label}: ${total} in all, ${[...totals].map(([k, n]) => `${n} ${k}`).join(', ')}; ${opened} notices opened, ${acked} acknowledged`,
  }, axis, nm, g);
  const legend = h('ul', { class: 'legend' }, kinds.filter((k) => totals.get(k)).map((k) =>
    h('li', { dataset: { kind: k, total: totals.get(k) } }, h('span', { class: 'swatch', style: `background: ${colourOf(k)}`, 'aria-hidden': 'true' }), k, ' ', h('strong', null, totals.get(k)))),
  h('li', { dataset: { notices: 'opened', total: opened }, title: 'Counted by this server since it started' }, h('span', { class: 'swatch dot opened', 'aria-hidden': 'true' }), 'notices opened ', h('strong', null, opened)),
  h('li', { dataset: { notices: 'acknowledged', total: acked }, title: 'Counted by this server since it started' }, h('span', { class: 'swatch dot acked', 'aria-hidden': 'true' }), 'acknowledged ', h('strong', null, acked)));
  fill(body, chart, legend);
}

/**
 * eventFilter is the kind and actor filter of an event list: apply(items) keeps the
 * matching ones. setActor(id) selects an actor (an actor link's target). onChange is
 * called when the selection changes.
 */
export function eventFilter(onChange, id) {
  const kind = h('select', { id: `${id}-kind`, 'aria-label': 'Filter by kind' },
    h('option', { value: '' }, 'every kind'), eventKinds().map((k) => h('option', { value: k }, k)));
  if (kind.options.length === 1) {
    loadKinds().then(() => append(kind, eventKinds().map((k) => h('option', { value: k }, k))), () => { /* the kinds of the events shown are enough */ });
  }
  const actor = h('select', { id: `${id}-actor`, 'aria-label': 'Filter by actor' }, h('option', { value: '' }, 'every actor'));
  const known = new Set();
  const el = h('div', { class: 'ev-filter', role: 'group', 'aria-label': 'Filter events' }, kind, actor);
  kind.addEventListener('change', onChange);
  actor.addEventListener('change', onChange);
  const actorOf = (ev) => ev.actorId || ev.actorType;
  return {
    el,
    learn(events) {
      let added = false;
      for (const ev of events) {
        const a = actorOf(ev);
        if (a && !known.has(a)) { known.add(a); added = true; }
      }
      if (!added) return;
      const cur = actor.value;
      fill(actor, h('option', { value: '' }, 'every actor'), [...known].sort().map((a) => h('option', { value: a }, a)));
      actor.value = cur;
    },
    setActor(a) {
      if (!known.has(a)) { known.add(a); actor.append(h('option', { value: a }, a)); }
      actor.value = a;
      onChange();
    },
    match(ev) {
      return (!kind.value || ev.kind === kind.value) && (!actor.value || actorOf(ev) === actor.value);
    },
    active() { return !!(kind.value || actor.value); },
  };
}

export { kindClass, agentOf };

/**
 * forbiddenPage is the whole page of a view the token may not read (CLT-1): it says
 * so once, with what the token may read instead, rather than a page of refused panels.
 */
export function forbiddenPage(viewer, what, crumbs, title) {
  const a = viewer.agent();
  return [
    crumbs,
    h('div', { class: 'page-head' }, h('div', null, h('h1', { tabindex: '-1' }, title))),
    h('section', { class: 'panel' },
      h('div', { class: 'banner unauth', role: 'alert', dataset: { forbiddenPage: '' } },
        h('strong', null, 'Not for this token. '),
        `The token ${viewer.label()} reads and acts for the sessions of agent ${a} only, so it may not read ${what}. `,
        'Use an admin token, or an auth file grant, to see it.'),
      h('p', null, 'What it may read: ',
        h('a', { href: '#/' }, 'its notices'), ', ',
        h('a', { href: `#/sessions?agent=${encodeURIComponent(a)}` }, `the sessions of agent ${a}`), ', ',
        h('a', { href: '#/tree' }, 'their tree'), ', ',
        h('a', { href: '#/acks' }, 'their acknowledgements'), '.')),
  ];
}

/** ageText is how long ago an RFC 3339 time was, compactly ("4 min", "2 h 5 min"). */
export function ageText(iso, now = Date.now()) {
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min`;
  const hrs = Math.floor(m / 60);
  if (hrs < 48) return `${hrs} h${m % 60 ? ` ${m % 60} min` : ''}`;
  return `${Math.floor(hrs / 24)} d`;
}

/** ageClass grades a wait: under 5 minutes fresh, under an hour long, else old. */
export function ageClass(iso, now = Date.now()) {
  const m = (now - Date.parse(iso)) / 60000;
  return m < 5 ? 'age-fresh' : m < 60 ? 'age-long' : 'age-old';
}

/** ageEl is an age that the page keeps current (refreshAges). */
export function ageEl(iso) {
  return h('span', { class: `age ${ageClass(iso)}`, dataset: { since: iso }, title: `since ${new Date(Date.parse(iso)).toLocaleString()}` }, ageText(iso));
}

/** refreshAges updates every age under root. */
export function refreshAges(root) {
  const now = Date.now();
  for (const el of root.querySelectorAll('.age[data-since]')) {
    el.textContent = ageText(el.dataset.since, now);
    el.className = `age ${ageClass(el.dataset.since, now)}`;
  }
}

export const ACK_FIELDS = 'watcher target targetAgentId changesSince notifiedVersion openedAt acknowledgedAt form followUpVersion principal role transport client';

/**
 * ackTable renders acknowledgement records (newest first): when, which notice (watcher
 * → target, L → N), how long it waited, who (the token's name and role) and from which
 * client (transport, client name), and the follow-up it opened.
 */
export function ackTable(records, { showWatcher = true } = {}) {
  return h('div', { class: 'table-wrap' }, h('table', { class: 'stacked acks', dataset: { acks: '' } },
    h('caption', { class: 'visually-hidden' }, 'Acknowledgements, newest first'),
    h('thead', null, h('tr', null,
      h('th', { scope: 'col' }, 'When'),
      h('th', { scope: 'col' }, 'Notice'),
      h('th', { scope: 'col', class: 'num' }, 'L → N'),
      h('th', { scope: 'col' }, 'Waited'),
      h('th', { scope: 'col' }, 'Who'),
      h('th', { scope: 'col' }, 'Client'))),
    h('tbody', null, records.map((r) => {
      const waited = Math.max(0, Date.parse(r.acknowledgedAt) - Date.parse(r.openedAt));
      return h('tr', { dataset: { watcher: r.watcher, target: r.target, version: r.notifiedVersion } },
        h('td', null, timeEl(r.acknowledgedAt),
          h('div', { class: 'small muted' }, new Date(Date.parse(r.acknowledgedAt)).toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' }))),
        h('td', null,
          showWatcher ? [h('a', { class: 'key', href: watcherHref(r.watcher) }, keyText(r.watcher)), h('span', { class: 'arrow', 'aria-label': 'about' }, ' → ')] : null,
          sessionLink(r.target, r.targetAgentId),
          r.followUpVersion ? h('div', { class: 'small muted', dataset: { followUp: r.followUpVersion } }, `follow-up notice N=${r.followUpVersion} opened`) : null),
        h('td', { class: 'num', 'data-label': 'L → N' }, `${r.changesSince} → ${r.notifiedVersion}`),
        h('td', { 'data-label': 'waited' }, ageText(new Date(Date.now() - waited).toISOString()),
          h('span', { class: 'badge form', title: formTitle(r.form) }, r.form)),
        h('td', { 'data-label': 'who', dataset: { principal: r.principal || '' } }, r.principal
          ? [h('span', { class: 'mono' }, r.principal), ' ', h('span', { class: 'badge' }, r.role)]
          : h('span', { class: 'muted', title: 'The server runs without --auth-file' }, 'no token')),
        h('td', { 'data-label': 'client', dataset: { transport: r.transport } },
          h('span', { class: 'badge info' }, r.transport), ' ',
          r.client ? h('span', { class: 'small wrap client' }, r.client) : h('span', { class: 'muted small' }, 'unnamed')));
    }))));
}

function formTitle(form) {
  switch (form) {
    case 'exact': return 'Named exactly (notifiedVersion): the notice the turn drained';
    case 'targets': return 'By target: whatever was pending on it (racy)';
    default: return 'Every pending notice of the watcher (racy)';
  }
}
