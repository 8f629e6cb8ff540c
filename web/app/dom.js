// Small DOM helpers. Text always goes through textContent (never innerHTML), so
// session keys, summaries and notice texts can never inject markup.

import { roleOf, onKinds } from './vocab.js';

// Badges drawn before the kinds were read take their colour when they are.
onKinds(() => {
  for (const el of document.querySelectorAll('.badge[data-badge-kind]')) el.className = `badge ${kindClass(el.dataset.badgeKind)}`;
});

/**
 * h builds an element: h('a', {href: '#/', class: 'x', onclick: fn}, 'text', child).
 * Attributes whose value is null, undefined or false are skipped; true sets an empty
 * attribute; on* functions become event listeners; dataset is an object of data-*.
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v == null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else if (v === true) el.setAttribute(k, '');
      else el.setAttribute(k, String(v));
    }
  }
  append(el, children);
  return el;
}

/** append adds children (nodes, strings, numbers, nested arrays; null is skipped). */
export function append(el, children) {
  for (const c of [children].flat(Infinity)) {
    if (c == null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

/** fill replaces el's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

const rtf = typeof Intl !== 'undefined' && Intl.RelativeTimeFormat
  ? new Intl.RelativeTimeFormat('en', { numeric: 'auto', style: 'short' })
  : null;

/** relTime formats an RFC 3339 time relative to now ("12 sec. ago"). */
export function relTime(iso) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso || '—';
  const s = Math.round((t - Date.now()) / 1000);
  const a = Math.abs(s);
  if (a < 5) return 'just now';
  if (!rtf) return new Date(t).toLocaleString();
  if (a < 60) return rtf.format(s, 'second');
  if (a < 3600) return rtf.format(Math.round(s / 60), 'minute');
  if (a < 86400) return rtf.format(Math.round(s / 3600), 'hour');
  return rtf.format(Math.round(s / 86400), 'day');
}

/** absTime formats an RFC 3339 time in the reader's locale, with seconds. */
export function absTime(iso) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso || '';
  return new Date(t).toLocaleString(undefined, {
    year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit',
  });
}

/** timeEl is a <time> that refreshTimes keeps relative; the title shows the exact time. */
export function timeEl(iso) {
  return h('time', { datetime: iso, title: absTime(iso), 'data-rel': '' }, relTime(iso));
}

/** refreshTimes updates every relative <time> under root. */
export function refreshTimes(root = document) {
  for (const t of root.querySelectorAll('time[data-rel]')) {
    t.textContent = relTime(t.getAttribute('datetime'));
  }
}

/** encodeKey escapes a session key for the hash, keeping its colons readable. */
export function encodeKey(key) {
  return encodeURIComponent(key).replace(/%3A/gi, ':');
}

/** sessionHref is the route of a session's page. */
export function sessionHref(agentId, key, params) {
  let href = `#/session/${encodeURIComponent(agentId || 'main')}/${encodeKey(key)}`;
  if (params) {
    const q = new URLSearchParams(params).toString();
    if (q) href += '?' + q;
  }
  return href;
}

/** watcherHref is the route of a watcher's view: everything it waits on. */
export function watcherHref(watcher) {
  return `#/watcher/${encodeKey(watcher)}`;
}

/** agentOf returns the agent id of a canonical key (agent:<id>:…), else 'main'. */
export function agentOf(key) {
  const parts = String(key).trim().toLowerCase().split(':').filter(Boolean);
  return parts.length >= 3 && parts[0] === 'agent' ? parts[1] : 'main';
}

/** isQualified reports whether key is agent-qualified (only those can be watchers, KEY-3). */
export function isQualified(key) {
  const parts = String(key).trim().toLowerCase().split(':').filter(Boolean);
  return parts.length >= 3 && parts[0] === 'agent';
}

/** keyText is a key with line-break opportunities after its colons. */
export function keyText(key) {
  const parts = String(key).split(':');
  return parts.map((p, i) => (i < parts.length - 1 ? [p + ':', h('wbr')] : p));
}

/** sessionLink links to a session page with the key in monospace. */
export function sessionLink(key, agentId, params) {
  return h('a', { class: 'key', href: sessionHref(agentId || agentOf(key), key, params) }, keyText(key));
}

/** toast shows a short message in the corner for a few seconds. */
export function toast(message, kind = '') {
  const box = document.getElementById('toasts');
  if (!box) return;
  const el = h('div', { class: `toast ${kind}`, role: kind === 'bad' ? 'alert' : 'status' }, message);
  box.append(el);
  setTimeout(() => el.remove(), kind === 'bad' || kind === 'warn' ? 7000 : 4000);
}

/**
 * throttle returns fn limited to one call per ms; calls in between are folded into
 * one trailing call, so the last change is never lost. cancel() drops a pending call.
 */
export function throttle(fn, ms) {
  let last = 0;
  let timer = null;
  const run = () => { timer = null; last = Date.now(); fn(); };
  const t = () => {
    if (timer) return;
    const wait = Math.max(0, last + ms - Date.now());
    timer = setTimeout(run, wait);
  };
  t.cancel = () => { clearTimeout(timer); timer = null; };
  return t;
}

/**
 * kindClass is an event kind's badge colour: by its role in the service's vocabulary
 * (vocab.js; SIG-1), and success or failure for a child run's end.
 */
export function kindClass(kind) {
  if (kind === 'run_completed') return 'k-ok';
  if (kind === 'run_failed') return 'k-bad';
  switch (roleOf(kind)) {
    case 'notifies': case 'resets': return 'k-notify';
    case 'seeds': return 'k-spawn';
    default: return '';
  }
}

/**
 * eventItem renders one StateEvent as a timeline row. session, when given, is shown.
 * An actor that is a session (an agent's qualified key) links to its page; any other
 * actor, when onActor is given, is a button that filters the list by it.
 */
export function eventItem(ev, session, onActor) {
  const payload = ev.payload || {};
  const meta = [];
  let actor = null;
  if (ev.actorId && isQualified(ev.actorId)) {
    actor = h('a', { class: 'mono actor', href: sessionHref(agentOf(ev.actorId), ev.actorId), title: 'The acting session' }, ev.actorId);
  } else if (ev.actorId && onActor) {
    actor = h('button', { type: 'button', class: 'link mono actor', title: `Show only the events of ${ev.actorId}`, onclick: () => onActor(ev.actorId) }, ev.actorId);
  } else if (ev.actorId) {
    actor = h('span', { class: 'mono' }, ev.actorId);
  }
  meta.push(h('span', null, ev.actorType, actor ? ' ' : null, actor));
  meta.push(timeEl(ev.occurredAt));
  if (ev.runId) meta.push(h('span', null, 'run ', h('span', { class: 'mono' }, ev.runId)));
  for (const [k, v] of Object.entries(payload)) meta.push(h('span', { class: 'badge' }, `${k}: ${v}`));
  return h('li', { dataset: { seq: ev.sequence, kind: ev.kind, actor: ev.actorId || ev.actorType } },
    h('div', { class: 'seq', title: 'sequence' }, '#', ev.sequence),
    h('div', null,
      session ? h('div', { class: 'ev-session' }, sessionLink(session.sessionKey, session.agentId)) : null,
      h('div', { class: 'ev-line' },
        h('span', { class: `badge ${kindClass(ev.kind)}`, dataset: { badgeKind: ev.kind } }, ev.kind),
        h('span', { class: 'ev-summary' }, ev.summary)),
      h('div', { class: 'ev-meta' }, meta)));
}
