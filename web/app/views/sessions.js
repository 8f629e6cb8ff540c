// Sessions (#/sessions?agent=&kinds=&active=&prefix=&first=&after=): the registry and
// every session with a log (sessionsList), with filters and keyset paging. The page
// refreshes itself when events arrive.

import { h, fill, sessionHref, timeEl, throttle, keyText } from '../dom.js';
import { gql, errorText, SESSION_FIELDS } from '../gql.js';

export const SESSION_KINDS = ['main', 'subagent', 'acp', 'direct', 'group', 'room', 'channel', 'cron', 'hook', 'global', 'other'];
const PAGE_SIZES = [25, 50, 100, 200];

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

export function sessionsView(root, { bus, query, panels, auth }) {
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
    saveHistory(history);
    const q = p.toString();
    location.hash = '#/sessions' + (q ? '?' + q : '');
  };

  // Filter form.
  const agent = h('input', { type: 'text', id: 'f-agent', name: 'agent', value: f.agent, placeholder: 'any', autocomplete: 'off', spellcheck: 'false' });
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
  const table = h('table', { id: 'sessions-table', class: 'stacked' },
    h('caption', { class: 'visually-hidden' }, 'Sessions'),
    h('thead', null, h('tr', null,
      h('th', { scope: 'col' }, 'Session'),
      h('th', { scope: 'col' }, 'Kind'),
      h('th', { scope: 'col', class: 'hide-sm' }, 'Agent'),
      h('th', { scope: 'col', class: 'num' }, 'Version'),
      h('th', { scope: 'col' }, 'Updated'))),
    tbody);
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
          sessions { ${SESSION_FIELDS} } pageInfo { hasNextPage endCursor } } }`,
      { filter, first: f.first, after: f.after || null });
    } catch (err) {
      // The table says so itself: never "Loading…" under an error.
      rows.clear();
      fill(tbody, h('tr', { dataset: { error: '' } }, h('td', { colspan: 5, class: 'empty' },
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
      fill(tbody, h('tr', null, h('td', { colspan: 5, class: 'empty' },
        f.agent || f.kinds.length || f.active || f.prefix ? 'No session matches these filters.' : 'No sessions yet. Record an event or run the demo (awareness serve --demo).')));
      return;
    }
    const order = sessions.map((s) => {
      const k = `${s.agentId}\u0000${s.sessionKey}`;
      const old = rows.get(k);
      if (old && old.s.stateVersion === s.stateVersion && old.s.updatedAt === s.updatedAt) return old.tr;
      const tr = sessionRow(s);
      if (old) tr.classList.add('updated');
      rows.set(k, { tr, s });
      return tr;
    });
    const same = order.length === tbody.children.length && order.every((tr, i) => tbody.children[i] === tr);
    if (!same) {
      const focused = tbody.contains(document.activeElement) ? document.activeElement.getAttribute('href') : null;
      fill(tbody, order);
      if (focused) { const a = tbody.querySelector(`a[href="${CSS.escape(focused)}"]`); if (a) a.focus(); }
    }
  };

  const listHead = h('div', { class: 'panel-head' }, h('h2', { id: 'sl-h' }, 'Session list'));
  const listPanel = h('section', { class: 'panel', id: 'sessions-panel', 'aria-labelledby': 'sl-h' },
    listHead,
    h('div', { class: 'table-wrap' }, table),
    status,
    h('div', { class: 'pager' }, pageInfo, h('div', { class: 'btns' }, prev, next)));
  fill(root,
    h('div', { class: 'page-head' },
      h('div', null,
        h('h1', { tabindex: '-1' }, 'Sessions'),
        h('p', { class: 'sub' }, 'Sessions with a signal log or a registry entry. The state version is the highest sequence of the session’s log.'))),
    h('section', { class: 'panel', 'aria-label': 'Filters', style: 'margin-bottom:1rem' }, form),
    listPanel);
  fill(tbody, h('tr', null, h('td', { colspan: 5, class: 'skeleton' }, 'Loading…')));
  const lp = panels.add(listPanel, listHead, load, 'the sessions');

  const refresh = throttle(() => lp.run(), 1000);
  const onEvent = () => refresh();
  bus.addEventListener('event', onEvent);
  cleanups.push(() => { bus.removeEventListener('event', onEvent); refresh.cancel(); lp.remove(); });
  return () => cleanups.forEach((fn) => fn());
}

function sessionRow(s) {
  return h('tr', { dataset: { key: s.sessionKey, agent: s.agentId } },
    h('td', null,
      h('a', { class: 'key', href: sessionHref(s.agentId, s.sessionKey) }, keyText(s.sessionKey)),
      s.displayName ? h('div', { class: 'small muted' }, s.displayName) : null),
    h('td', null, h('span', { class: 'badge accent' }, s.kind)),
    h('td', { class: 'hide-sm mono' }, s.agentId),
    h('td', { class: 'num', 'data-label': 'version' }, s.stateVersion == null ? h('span', { class: 'muted', title: 'no logged change' }, '—') : s.stateVersion),
    h('td', null, timeEl(s.updatedAt)));
}
