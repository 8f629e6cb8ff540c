// Sessions (#/sessions?agent=&kinds=&active=&prefix=&first=&after=&sort=&dir=): the
// registry and every session with a log (sessionsList), with filters and keyset paging
// (in the server's (agent, key) order). The table sorts by any column (the page's rows:
// up to 500 with "Per page") and its footer totals them: sessions, events (state
// versions), tokens and pending notices (from the live notice feed). The page refreshes
// itself when events arrive.

import { h, fill, sessionHref, timeEl, throttle, keyText } from '../dom.js';
import { agentNote } from './home.js';
import { pairKey } from '../notices.js';
import { gql, errorText, SESSION_FIELDS } from '../gql.js';

export const SESSION_KINDS = ['main', 'subagent', 'acp', 'direct', 'group', 'room', 'channel', 'cron', 'hook', 'global', 'other'];
const PAGE_SIZES = [25, 50, 100, 200, 500];
// The sortable columns: id, heading, the value sorted by, its default direction.
const COLUMNS = [
  { id: 'key', label: 'Session', dir: 'asc', value: (s) => s.sessionKey },
  { id: 'kind', label: 'Kind', dir: 'asc', value: (s) => s.kind },
  { id: 'agent', label: 'Agent', dir: 'asc', value: (s) => s.agentId, cls: 'hide-sm' },
  { id: 'version', label: 'Events', dir: 'desc', value: (s) => s.stateVersion ?? -1, num: true, title: 'The state version: how many events the session logged' },
  { id: 'pending', label: 'Pending', dir: 'desc', value: (s, p) => p(s).about + p(s).held, num: true, title: 'Pending notices about it (watchers waiting to reconcile it) + held by it as a watcher' },
  { id: 'tokens', label: 'Tokens', dir: 'desc', value: (s) => s.totalTokens ?? -1, num: true, cls: 'hide-sm', title: 'totalTokens, as the gateway reported' },
  { id: 'updated', label: 'Updated', dir: 'desc', value: (s) => s.updatedAt },
];

// Cursors of the pages before the current one, per filter, for "Previous"; kept in
// sessionStorage so that a reload of page 2 still knows page 1.
const HISTORY_KEY = 'awareness.sessionsHistory';
function loadHistory() {
  try {
    const v = JSON.parse(sessionStorage.getItem(HISTORY_KEY) || 'null');
    if (v && typeof v.filterKey === 'string' && Array.isArray(v.stack)) return v;
  } catch { /* fresh */ }
  return { filterKey: '', stack: [] };
}
function saveHistory(hist) {
  try { sessionStorage.setItem(HISTORY_KEY, JSON.stringify(hist)); } catch { /* memory only */ }
}

export function sessionsView(root, { bus, query, panels, auth, notices, viewer }) {
  const history = loadHistory();
  const cleanups = [];
  const f = {
    agent: query.get('agent') || '',
    kinds: (query.get('kinds') || '').split(',').filter((k) => SESSION_KINDS.includes(k)),
    active: query.get('active') || '',
    prefix: query.get('prefix') || '',
    first: PAGE_SIZES.includes(Number(query.get('first'))) ? Number(query.get('first')) : 50,
    after: query.get('after') || '',
    page: /^[1-9]\d*$/.test(query.get('page') || '') ? Number(query.get('page')) : 1,
  };
  let sort = COLUMNS.find((c) => c.id === query.get('sort')) || null;
  let dir = query.get('dir') === 'asc' || query.get('dir') === 'desc' ? query.get('dir') : (sort ? sort.dir : 'asc');
  const filterKey = JSON.stringify([f.agent, f.kinds, f.active, f.prefix, f.first]);
  if (history.filterKey !== filterKey || !f.after) history.stack = [];
  history.filterKey = filterKey;
  // The stack holds the cursors of pages 1 … page-1; a reload keeps it.
  if (f.after && history.stack.length !== f.page - 1) history.stack = history.stack.slice(0, Math.max(0, f.page - 1));
  saveHistory(history);

  const go = (over) => {
    const p = new URLSearchParams();
    const v = { ...f, ...over };
    if (v.agent) p.set('agent', v.agent);
    if (v.kinds.length) p.set('kinds', v.kinds.join(','));
    if (v.active) p.set('active', v.active);
    if (v.prefix) p.set('prefix', v.prefix);
    if (v.first !== 50) p.set('first', String(v.first));
    if (v.after) p.set('after', v.after);
    if (v.after && v.page > 1) p.set('page', String(v.page));
    if (sort) { p.set('sort', sort.id); p.set('dir', dir); }
    saveHistory(history);
    const q = p.toString();
    location.hash = '#/sessions' + (q ? '?' + q : '');
  };

  // Filter form.
  const own = viewer.agent();
  const agent = h('input', {
    type: 'text', id: 'f-agent', name: 'agent', value: own || f.agent, placeholder: 'any', autocomplete: 'off', spellcheck: 'false',
    readonly: !!own, title: own ? `This token reads the sessions of agent ${own} only` : null,
  });
  const prefix = h('input', { type: 'text', id: 'f-prefix', name: 'prefix', value: f.prefix, placeholder: 'agent:main:subagent:', autocomplete: 'off', spellcheck: 'false' });
  const active = h('input', { type: 'number', id: 'f-active', name: 'active', min: '1', value: f.active, placeholder: 'any' });
  const size = h('select', { id: 'f-first', name: 'first' }, PAGE_SIZES.map((n) => h('option', { value: n, selected: n === f.first }, n)));
  const kindBoxes = SESSION_KINDS.map((k) => h('input', { type: 'checkbox', name: 'kinds', value: k, checked: f.kinds.includes(k) }));
  const form = h('form', { class: 'form', role: 'search', 'aria-label': 'Filter sessions' },
    h('div', { class: 'field' }, h('label', { for: 'f-prefix' }, 'Key prefix'), prefix),
    h('div', { class: 'field narrow' }, h('label', { for: 'f-agent' }, 'Agent'), agent),
    h('div', { class: 'field narrow' }, h('label', { for: 'f-active' }, 'Active (min)'), active),
    h('div', { class: 'field narrow' }, h('label', { for: 'f-first' }, 'Per page'), size),
    h('fieldset', { class: 'field', style: 'flex-basis:100%' },
      h('legend', null, 'Kinds'),
      h('div', { class: 'chips' }, SESSION_KINDS.map((k, i) => h('label', { class: 'chip' }, kindBoxes[i], k)))),
    h('div', { class: 'form-actions' },
      h('button', { type: 'submit', class: 'primary' }, 'Apply'),
      h('button', { type: 'button', onclick: () => { history.stack = []; saveHistory(history); location.hash = '#/sessions'; } }, 'Clear')));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    history.stack = [];
    go({
      agent: agent.value.trim().toLowerCase(),
      prefix: prefix.value.trim(),
      active: active.value.trim(),
      first: Number(size.value),
      kinds: kindBoxes.filter((b) => b.checked).map((b) => b.value),
      after: '',
      page: 1,
    });
  });

  const status = h('p', { class: 'form-result', role: 'status' });
  const tbody = h('tbody');
  const tfoot = h('tfoot');
  const headRow = h('tr');
  const table = h('table', { id: 'sessions-table', class: 'stacked sortable' },
    h('caption', { class: 'visually-hidden' }, 'Sessions; the column buttons sort the rows'),
    h('thead', null, headRow), tbody, tfoot);
  const sortNote = h('p', { class: 'small muted', id: 'sort-note' });
  // The same order from a select and a direction button: the header row is hidden at
  // phone width, where rows are cards.
  const sortSelect = h('select', { id: 'sort-by', 'aria-label': 'Sort the rows by' },
    h('option', { value: '' }, 'key order'), COLUMNS.map((c) => h('option', { value: c.id }, c.label)));
  const dirBtn = h('button', { type: 'button', id: 'sort-dir' });
  const setSort = (c, d) => {
    sort = c;
    dir = d;
    const q = new URLSearchParams(location.hash.split('?')[1] || '');
    if (sort) { q.set('sort', sort.id); q.set('dir', dir); } else { q.delete('sort'); q.delete('dir'); }
    window.history.replaceState(window.history.state, '', `#/sessions${q.toString() ? `?${q}` : ''}`);
    paintHead();
    paintRows();
  };
  sortSelect.addEventListener('change', () => {
    const c = COLUMNS.find((x) => x.id === sortSelect.value) || null;
    setSort(c, c ? c.dir : 'asc');
  });
  dirBtn.addEventListener('click', () => { if (sort) setSort(sort, dir === 'asc' ? 'desc' : 'asc'); });
  const paintHead = () => {
    sortSelect.value = sort ? sort.id : '';
    dirBtn.hidden = !sort;
    fill(dirBtn, dir === 'asc' ? '↑ ascending' : '↓ descending');
    dirBtn.setAttribute('aria-label', `Order: ${dir === 'asc' ? 'ascending' : 'descending'}; press to reverse`);
    fill(headRow, COLUMNS.map((c) => {
      const active = sort && sort.id === c.id;
      const btn = h('button', {
        type: 'button', class: 'sort', dataset: { sort: c.id }, title: c.title || null,
        'aria-label': `Sort by ${c.label.toLowerCase()}${active ? (dir === 'asc' ? ', ascending now' : ', descending now') : ''}`,
      }, c.label, h('span', { class: 'sort-mark', 'aria-hidden': 'true' }, active ? (dir === 'asc' ? ' ▲' : ' ▼') : ''));
      btn.addEventListener('click', () => {
        // The order is in the URL (a reload keeps it); the rows are the loaded ones.
        setSort(c, active ? (dir === 'asc' ? 'desc' : 'asc') : c.dir);
        const again = headRow.querySelector(`button[data-sort="${c.id}"]`);
        if (again) again.focus();
      });
      return h('th', { scope: 'col', class: [c.num ? 'num' : '', c.cls || ''].join(' ').trim() || null, 'aria-sort': active ? (dir === 'asc' ? 'ascending' : 'descending') : 'none' }, btn);
    }));
  };
  paintHead();
  const prev = h('button', { type: 'button', disabled: !f.after }, '← Previous');
  const next = h('button', { type: 'button', disabled: true }, 'Next →');
  const pageInfo = h('span');
  prev.addEventListener('click', () => {
    if (history.stack.length) go({ after: history.stack.pop(), page: f.page - 1 });
    else go({ after: '', page: 1 });
  });
  let endCursor = null;
  next.addEventListener('click', () => {
    if (!endCursor) return;
    history.stack.push(f.after);
    go({ after: endCursor, page: f.page + 1 });
  });

  const rows = new Map(); // agent\0key → {tr, s}
  const load = async () => {
    const filter = {};
    if (f.agent) filter.agentId = f.agent;
    if (f.kinds.length) filter.kinds = f.kinds;
    if (f.active) filter.activeMinutes = Number(f.active);
    if (f.prefix) filter.keyPrefix = f.prefix;
    let d;
    try {
      d = await gql(`query Sessions($filter: SessionFilter, $first: Int, $after: String) {
        sessionsList(filter: $filter, first: $first, after: $after) {
          sessions { ${SESSION_FIELDS} totalTokens } pageInfo { hasNextPage endCursor } } }`,
      { filter, first: f.first, after: f.after || null });
    } catch (err) {
      // The table says so itself: never "Loading…" under an error.
      rows.clear();
      loadedSessions = [];
      fill(tfoot);
      fill(tbody, h('tr', { dataset: { error: '' } }, h('td', { colspan: COLUMNS.length, class: 'empty' },
        'The sessions could not be listed (see above); the list reloads by itself.')));
      status.className = 'form-result';
      fill(status);
      throw err;
    }
    status.className = 'form-result';
    fill(status);
    const { sessions, pageInfo: pi } = d.sessionsList;
    endCursor = pi.hasNextPage ? pi.endCursor : null;
    next.disabled = !endCursor;
    const page = f.after ? f.page : 1;
    fill(pageInfo, sessions.length ? `Page ${page} · ${sessions.length} session${sessions.length === 1 ? '' : 's'}` : '');
    if (!sessions.length) {
      rows.clear();
      loadedSessions = [];
      fill(tfoot);
      fill(tbody, h('tr', null, h('td', { colspan: COLUMNS.length, class: 'empty' },
        f.agent || f.kinds.length || f.active || f.prefix ? 'No session matches these filters.' : 'No sessions yet. Record an event or run the demo (awareness serve --demo).')));
      return;
    }
    loadedSessions = sessions;
    hasMore = !!endCursor;
    paintRows();
  };

  // The rows of the loaded page in the chosen order, with their totals.
  let loadedSessions = [];
  let hasMore = false;
  const pendingOf = (s) => {
    const about = notices.aboutTarget(s.agentId, s.sessionKey).length;
    const held = notices.forWatcher(s.sessionKey).length;
    return { about, held };
  };
  const paintRows = () => {
    const list = loadedSessions.slice();
    if (sort) {
      const m = dir === 'asc' ? 1 : -1;
      list.sort((a, b) => {
        const x = sort.value(a, pendingOf); const y = sort.value(b, pendingOf);
        return (x < y ? -1 : x > y ? 1 : 0) * m || (a.sessionKey < b.sessionKey ? -1 : 1);
      });
    }
    const order = list.map((s) => {
      const k = `${s.agentId}\u0000${s.sessionKey}`;
      const old = rows.get(k);
      const p = pendingOf(s);
      if (old && old.s.stateVersion === s.stateVersion && old.s.updatedAt === s.updatedAt && old.s.totalTokens === s.totalTokens && old.p.about === p.about && old.p.held === p.held) return old.tr;
      const tr = sessionRow(s, p);
      if (old) tr.classList.add('updated');
      rows.set(k, { tr, s, p });
      return tr;
    });
    const same = order.length === tbody.children.length && order.every((tr, i) => tbody.children[i] === tr);
    if (!same) {
      const focused = tbody.contains(document.activeElement) ? document.activeElement.getAttribute('href') : null;
      fill(tbody, order);
      if (focused) { const a = tbody.querySelector(`a[href="${CSS.escape(focused)}"]`); if (a) a.focus(); }
    }
    // Totals of the rows shown.
    // A notice between two listed sessions is one notice: counted once.
    let events = 0; let tokens = 0; let withTokens = 0;
    const pending = new Set();
    for (const s of list) {
      events += s.stateVersion || 0;
      if (s.totalTokens != null) { tokens += s.totalTokens; withTokens++; }
      for (const n of notices.aboutTarget(s.agentId, s.sessionKey)) pending.add(pairKey(n));
      for (const n of notices.forWatcher(s.sessionKey)) pending.add(pairKey(n));
    }
    fill(tfoot, list.length ? h('tr', { class: 'totals', dataset: { totals: '' } },
      h('th', { scope: 'row' }, `Total · ${list.length} session${list.length === 1 ? '' : 's'}${hasMore ? ' on this page' : ''}`),
      h('td', { class: 'hide-sm' }), h('td', { class: 'hide-sm' }),
      h('td', { class: 'num', 'data-label': 'events', dataset: { totalEvents: events } }, events.toLocaleString()),
      h('td', { class: 'num', 'data-label': 'pending', dataset: { totalPending: pending.size }, title: 'Pending notices about these sessions or held by them, each counted once' }, pending.size),
      h('td', { class: 'num hide-sm', 'data-label': 'tokens', dataset: { totalTokens: tokens } }, withTokens ? tokens.toLocaleString() : '—'),
      h('td')) : null);
    fill(sortNote, sort && hasMore ? `Sorted by ${sort.label.toLowerCase()} within this page; more pages follow in key order (Per page up to 500 sorts more at once).` : '');
  };
  const onNotices = throttle(() => { if (loadedSessions.length) paintRows(); }, 500);
  notices.addEventListener('change', onNotices);
  cleanups.push(() => { notices.removeEventListener('change', onNotices); onNotices.cancel(); });

  const listHead = h('div', { class: 'panel-head' }, h('h2', { id: 'sl-h' }, 'Session list'),
    h('span', { class: 'btns sort-ctl' }, sortSelect, dirBtn));
  const listPanel = h('section', { class: 'panel', id: 'sessions-panel', 'aria-labelledby': 'sl-h' },
    listHead,
    h('div', { class: 'table-wrap' }, table),
    sortNote,
    status,
    h('div', { class: 'pager' }, pageInfo, h('div', { class: 'btns' }, prev, next)));
  fill(root,
    h('div', { class: 'page-head' },
      h('div', null,
        h('h1', { tabindex: '-1' }, 'Sessions'),
        h('p', { class: 'sub' }, 'Sessions with a signal log or a registry entry. Events is the state version: the highest sequence of the session’s log.'),
        agentNote(viewer))),
    h('section', { class: 'panel', 'aria-label': 'Filters', style: 'margin-bottom:1rem' }, form),
    listPanel);
  fill(tbody, h('tr', null, h('td', { colspan: COLUMNS.length, class: 'skeleton' }, 'Loading…')));
  const lp = panels.add(listPanel, listHead, load, 'the sessions');

  const refresh = throttle(() => lp.run(), 1000);
  const onEvent = () => refresh();
  bus.addEventListener('event', onEvent);
  cleanups.push(() => { bus.removeEventListener('event', onEvent); refresh.cancel(); lp.remove(); });
  return () => cleanups.forEach((fn) => fn());
}

function sessionRow(s, p) {
  return h('tr', { dataset: { key: s.sessionKey, agent: s.agentId } },
    h('td', null,
      h('a', { class: 'key', href: sessionHref(s.agentId, s.sessionKey) }, keyText(s.sessionKey)),
      s.displayName ? h('div', { class: 'small muted' }, s.displayName) : null),
    h('td', null, h('span', { class: 'badge accent' }, s.kind)),
    h('td', { class: 'hide-sm mono' }, s.agentId),
    h('td', { class: 'num', 'data-label': 'events' }, s.stateVersion == null ? h('span', { class: 'muted', title: 'no logged change' }, '—') : s.stateVersion),
    h('td', { class: 'num', 'data-label': 'pending', dataset: { pending: p.about + p.held } },
      p.about + p.held ? h('span', { class: 'badge wake', title: `${p.about} watcher(s) wait to reconcile it; it holds ${p.held} notice(s)` }, p.about + p.held) : h('span', { class: 'muted' }, '0')),
    h('td', { class: 'num hide-sm', 'data-label': 'tokens' }, s.totalTokens == null ? h('span', { class: 'muted' }, '—') : s.totalTokens.toLocaleString()),
    h('td', null, timeEl(s.updatedAt)));
}
