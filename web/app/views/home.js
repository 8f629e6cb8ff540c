// Home (#/ and #/notices): the live feed of pending stale notices of every watcher,
// the recent activity across sessions, and the upstream links.

import { h, fill, eventItem, throttle } from '../dom.js';
import { gql, errorText, EVENT_FIELDS, SESSION_FIELDS } from '../gql.js';
import { pairKey } from '../notices.js';
import { noticeCard, upstreamPanel } from './components.js';

const ACTIVITY_MAX = 40;

export function homeView(root, { notices, bus }) {
  const cleanups = [];

  // Pending notices.
  const count = h('span', { class: 'count', 'aria-label': 'pending notices' }, '0');
  const filter = h('input', {
    type: 'search', id: 'notice-filter', placeholder: 'Filter by watcher or target',
    'aria-label': 'Filter notices by watcher or target', autocomplete: 'off',
  });
  const list = h('div', { class: 'notices', id: 'notice-list', 'aria-live': 'polite', 'aria-relevant': 'additions removals' });
  const noticesPanel = h('section', { class: 'panel', 'aria-labelledby': 'notices-h' },
    h('div', { class: 'panel-head' },
      h('h2', { id: 'notices-h', tabindex: '-1' }, 'Pending stale notices', count),
      h('span', { class: 'hint' }, 'live · every watcher')),
    h('div', { class: 'form', style: 'margin-bottom:.75rem' }, h('div', { class: 'field' }, filter)),
    list);

  const cards = new Map(); // pairKey → {n, el}
  const renderNotices = () => {
    const q = filter.value.trim().toLowerCase();
    const all = notices.list();
    const shown = q ? all.filter((n) => n.watcher.includes(q) || n.target.includes(q)) : all;
    fill(count, all.length);
    count.classList.toggle('hot', all.length > 0);
    const hadFocus = list.contains(document.activeElement);
    const focusIndex = hadFocus ? [...list.children].findIndex((c) => c.contains(document.activeElement)) : -1;
    const next = new Map();
    const els = shown.map((n) => {
      const k = pairKey(n);
      const old = cards.get(k);
      const same = old && old.n.notifiedVersion === n.notifiedVersion && old.n.currentMaterial === n.currentMaterial;
      const el = same ? old.el : noticeCard(n, notices);
      next.set(k, { n, el });
      return el;
    });
    cards.clear();
    for (const [k, v] of next) cards.set(k, v);
    if (!els.length) {
      fill(list, h('p', { class: 'empty' }, all.length
        ? 'No notice matches the filter.'
        : notices.error
          ? `The notice feed failed: ${errorText(notices.error)}`
          : 'No pending notices. When a person or another agent changes a watched session, the watcher’s one consolidated notice appears here.'));
    } else {
      const same = els.length === list.children.length && els.every((el, i) => list.children[i] === el);
      if (!same) fill(list, els);
    }
    // Keep keyboard users in place when the card they acted on leaves.
    if (hadFocus && !list.contains(document.activeElement)) {
      const target = els[Math.min(focusIndex, els.length - 1)];
      const btn = target && target.querySelector('button.ack');
      (btn || document.getElementById('notices-h')).focus();
    }
  };
  filter.addEventListener('input', renderNotices);
  const onChange = () => renderNotices();
  notices.addEventListener('change', onChange);
  cleanups.push(() => notices.removeEventListener('change', onChange));

  // Recent activity across sessions.
  const activityList = h('ol', { class: 'timeline', id: 'activity', 'aria-live': 'polite' });
  const activityPanel = h('section', { class: 'panel', 'aria-labelledby': 'activity-h' },
    h('div', { class: 'panel-head' },
      h('h2', { id: 'activity-h' }, 'Recent activity'),
      h('span', { class: 'hint' }, 'live · all sessions')),
    activityList);
  const activity = new Activity(activityList);
  activity.init();
  const tick = throttle(() => activity.poll(), 800);
  const onEvent = () => tick();
  bus.addEventListener('event', onEvent);
  bus.addEventListener('reconnect', onEvent);
  cleanups.push(() => { bus.removeEventListener('event', onEvent); bus.removeEventListener('reconnect', onEvent); tick.cancel(); });

  const upstream = upstreamPanel();

  fill(root,
    h('div', { class: 'page-head' },
      h('div', null,
        h('h1', { tabindex: '-1' }, 'Notices'),
        h('p', { class: 'sub' }, 'One consolidated notice per watcher and target. Acknowledge it once the watcher has taken it into its prompt.'))),
    h('div', { class: 'grid' },
      h('div', { class: 'stack' }, noticesPanel),
      h('div', { class: 'stack' }, activityPanel, upstream.el)));
  renderNotices();

  return () => cleanups.forEach((fn) => fn());
}

/**
 * Activity follows the newest events of every session. stateEvents without a session
 * does not say which session an event belongs to, so each tick asks sessionsList for
 * the recently updated sessions and reads the delta of those whose version moved.
 */
class Activity {
  constructor(list) {
    this.list = list;
    this.known = new Map();
    this.items = [];
    this.ready = false;
  }

  async init() {
    try {
      const d = await gql(`{ sessionsList(filter: {activeMinutes: 1440}, first: 200) { sessions { ${SESSION_FIELDS} } } }`);
      const sessions = d.sessionsList.sessions.filter((s) => s.stateVersion);
      for (const s of sessions) this.known.set(id(s), s.stateVersion);
      sessions.sort((a, b) => (a.updatedAt < b.updatedAt ? 1 : -1));
      const top = sessions.slice(0, 8).map((s) => ({ s, since: Math.max(0, s.stateVersion - 4) }));
      this.items = await deltas(top);
      this.ready = true;
      this.render(new Set());
    } catch (err) {
      fill(this.list, h('li', { class: 'gap-mark' }, `Could not load activity: ${errorText(err)}`));
    }
  }

  async poll() {
    if (!this.ready) return this.init();
    let d;
    try {
      d = await gql(`{ sessionsList(filter: {activeMinutes: 15}, first: 200) { sessions { ${SESSION_FIELDS} } } }`);
    } catch {
      return;
    }
    const moved = [];
    for (const s of d.sessionsList.sessions) {
      if (!s.stateVersion) continue;
      const k = this.known.get(id(s));
      if (k === undefined || s.stateVersion > k) moved.push({ s, since: k === undefined ? Math.max(0, s.stateVersion - 3) : k });
      this.known.set(id(s), Math.max(k || 0, s.stateVersion));
    }
    if (!moved.length) return;
    let fresh;
    try {
      fresh = await deltas(moved.slice(0, 20));
    } catch {
      return;
    }
    const seen = new Set(this.items.map(itemId));
    const add = fresh.filter((it) => !seen.has(itemId(it)));
    this.items = [...add, ...this.items].sort(byTime).slice(0, ACTIVITY_MAX);
    this.render(new Set(add.map(itemId)));
  }

  render(freshIds) {
    if (!this.items.length) {
      fill(this.list, h('li', { class: 'since-mark' }, 'No activity in the last day.'));
      return;
    }
    fill(this.list, this.items.map((it) => {
      const li = eventItem(it.ev, it.s);
      if (freshIds.has(itemId(it))) li.classList.add('fresh');
      return li;
    }));
  }
}

function id(s) { return `${s.agentId}\u0000${s.sessionKey}`; }
function itemId(it) { return `${id(it.s)}\u0000${it.ev.sequence}`; }
function byTime(a, b) {
  if (a.ev.occurredAt !== b.ev.occurredAt) return a.ev.occurredAt < b.ev.occurredAt ? 1 : -1;
  return b.ev.sequence - a.ev.sequence;
}

/** deltas reads the events after `since` of several sessions in one request. */
async function deltas(entries) {
  if (!entries.length) return [];
  const vars = {};
  const decl = [];
  const fields = entries.map(({ s, since }, i) => {
    vars[`k${i}`] = s.sessionKey;
    vars[`a${i}`] = s.agentId;
    vars[`c${i}`] = since;
    decl.push(`$k${i}: String!, $a${i}: String, $c${i}: Int`);
    return `s${i}: sessionStatus(sessionKey: $k${i}, agentId: $a${i}, changesSince: $c${i}, limit: 20) { stateChanges { events { ${EVENT_FIELDS} } } }`;
  });
  const d = await gql(`query Deltas(${decl.join(', ')}) { ${fields.join(' ')} }`, vars);
  const out = [];
  entries.forEach(({ s }, i) => {
    const ch = d[`s${i}`] && d[`s${i}`].stateChanges;
    for (const ev of (ch ? ch.events : [])) out.push({ s, ev });
  });
  return out.sort(byTime);
}
