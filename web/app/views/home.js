// Home (#/ and #/notices): the live feed of pending stale notices of every watcher,
// the activity chart, the recent activity across sessions (filterable by kind and
// actor), and the upstream links.

import { h, fill, eventItem, throttle } from '../dom.js';
import { gql, EVENT_FIELDS, SESSION_FIELDS } from '../gql.js';
import { noticeList, noNotices, noticePanel, upstreamPanel, activityChart, eventFilter } from './components.js';

const ACTIVITY_MAX = 40;

export function homeView(root, { notices, bus, panels, auth, viewer }) {
  const cleanups = [];
  const scope = viewer.agent() ? `the sessions of agent ${viewer.agent()}` : 'all sessions';

  // Pending notices.
  const count = h('span', { class: 'count', 'aria-label': 'pending notices' }, '0');
  const filter = h('input', {
    type: 'search', id: 'notice-filter', placeholder: 'Filter by watcher or target',
    'aria-label': 'Filter notices by watcher or target', autocomplete: 'off',
  });
  const list = h('div', { class: 'notices', id: 'notice-list', 'aria-live': 'polite', 'aria-relevant': 'additions removals' });
  const noticesHead = h('div', { class: 'panel-head' },
    h('h2', { id: 'notices-h', tabindex: '-1' }, 'Pending stale notices', count),
    h('span', { class: 'hint' }, viewer.agent() ? `the watchers of agent ${viewer.agent()}` : 'every watcher'));
  const noticesPanel = h('section', { class: 'panel', id: 'notices', 'aria-labelledby': 'notices-h' },
    noticesHead,
    h('div', { class: 'form', style: 'margin-bottom:.75rem' }, h('div', { class: 'field' }, filter)),
    list);

  const guidance = () => h('div', null,
    h('p', null, 'No pending notices: every watcher is in sync. When a person or another agent changes a watched session, the watcher’s one consolidated notice appears here, live.'),
    h('p', null, 'To see one: start the server with ', h('code', null, 'awareness serve --demo'),
      ', or watch a session and record a human message into it:'),
    h('pre', { class: 'example' }, 'mutation {\n  watch(input: {watcher: "agent:main:main", target: "agent:main:subagent:w1"}) { watched }\n  recordEvent(input: {sessionKey: "agent:main:subagent:w1",\n    kind: human_direct_message, actorType: human}) { noticesOpened }\n}'));
  const shownNotices = () => {
    const q = filter.value.trim().toLowerCase();
    const all = notices.list();
    return q ? all.filter((n) => n.watcher.includes(q) || n.target.includes(q)) : all;
  };
  const paintList = noticeList(list, notices, shownNotices,
    () => (notices.list().length ? h('p', { class: 'empty' }, 'No notice matches the filter.') : noNotices(notices, auth, guidance())));
  const renderNotices = () => {
    const all = notices.list();
    fill(count, all.length);
    count.classList.toggle('hot', all.length > 0);
    paintList();
  };
  filter.addEventListener('input', renderNotices);
  notices.addEventListener('change', renderNotices);
  auth.addEventListener('change', renderNotices);
  cleanups.push(() => { notices.removeEventListener('change', renderNotices); auth.removeEventListener('change', renderNotices); });
  // The notice feed is a subscription: its freshness is the connection's.
  noticePanel(panels, notices, noticesPanel, noticesHead, 'the pending notices', cleanups);

  // Recent activity across sessions.
  const activityList = h('ol', { class: 'timeline', id: 'activity', 'aria-live': 'polite' });
  const evFilter = eventFilter(() => activity.render(new Set()), 'af');
  const activityHead = h('div', { class: 'panel-head' },
    h('h2', { id: 'activity-h' }, 'Recent activity'),
    h('span', { class: 'hint' }, scope));
  const activityPanel = h('section', { class: 'panel', id: 'activity-panel', 'aria-labelledby': 'activity-h' },
    activityHead, evFilter.el, activityList);
  const activity = new Activity(activityList, evFilter);
  const activityP = panels.add(activityPanel, activityHead, () => activity.init(), 'the recent activity');
  const tick = throttle(() => { if (activityP.state === 'live') activity.poll(); }, 800);
  const onEvent = () => tick();
  bus.addEventListener('event', onEvent);
  cleanups.push(() => { bus.removeEventListener('event', onEvent); tick.cancel(); activityP.remove(); });

  const chart = activityChart({ panels, bus, notices, cleanups, scope });
  const upstream = upstreamPanel({ panels, bus, auth, cleanups });

  fill(root,
    h('div', { class: 'page-head' },
      h('div', null,
        h('h1', { tabindex: '-1' }, 'Notices'),
        h('p', { class: 'sub' }, 'One consolidated notice per watcher and target. Acknowledge it once the watcher has taken it into its prompt. ',
          h('span', { class: 'hint-keys' }, 'Keys: ', h('kbd', null, 'j'), ' ', h('kbd', null, 'k'), ' move, ', h('kbd', null, 'a'), ' acknowledges, ', h('kbd', null, '?'), ' lists all.')),
        agentNote(viewer))),
    h('div', { class: 'grid' },
      h('div', { class: 'stack' }, noticesPanel),
      h('div', { class: 'stack' }, chart, activityPanel, upstream.el)));
  renderNotices();

  return () => cleanups.forEach((fn) => fn());
}

/**
 * Activity follows the newest events of every session. stateEvents without a session
 * does not say which session an event belongs to, so each tick asks sessionsList for
 * the recently updated sessions and reads the delta of those whose version moved.
 */
class Activity {
  constructor(list, filter) {
    this.list = list;
    this.filter = filter;
    this.known = new Map();
    this.items = [];
  }

  async init() {
    const d = await gql(`{ sessionsList(filter: {activeMinutes: 1440}, first: 200) { sessions { ${SESSION_FIELDS} } } }`);
    const sessions = d.sessionsList.sessions.filter((s) => s.stateVersion);
    this.known.clear();
    for (const s of sessions) this.known.set(id(s), s.stateVersion);
    sessions.sort((a, b) => (a.updatedAt < b.updatedAt ? 1 : -1));
    const top = sessions.slice(0, 8).map((s) => ({ s, since: Math.max(0, s.stateVersion - 4) }));
    this.items = await deltas(top);
    this.render(new Set());
  }

  async poll() {
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
      if (k !== undefined && s.stateVersion < k) {
        // A version never goes back on one database (SIG-3): this is another one (a
        // restart on other data). What the list shows is not the server's: start over.
        await this.init();
        return;
      }
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
    this.filter.learn(this.items.map((it) => it.ev));
    if (!this.items.length) {
      fill(this.list, h('li', { class: 'since-mark', dataset: { emptyActivity: '' } },
        'No activity in the last day. Events recorded with recordEvent (or by the demo, awareness serve --demo) appear here live.'));
      return;
    }
    const shown = this.items.filter((it) => this.filter.match(it.ev));
    if (!shown.length) {
      fill(this.list, h('li', { class: 'since-mark' }, 'No recent event matches the filter.'));
      return;
    }
    fill(this.list, shown.map((it) => {
      const li = eventItem(it.ev, it.s, (a) => this.filter.setActor(a));
      if (freshIds.has(itemId(it))) li.classList.add('fresh');
      return li;
    }));
  }
}

function id(s) { return `${s.agentId}\u0000${s.sessionKey}`; }

/** agentNote says what an agent-role token cannot see; null for an admin. */
export function agentNote(viewer) {
  const a = viewer.agent();
  if (!a) return null;
  return h('p', { class: 'banner info agent-note', dataset: { agentScope: a } },
    h('strong', null, `Token ${viewer.label()}: `),
    `this page shows the sessions and notices of agent ${a} only. Other agents’ sessions need an admin token.`);
}
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
