// The manager → sub-agent tree (#/tree?agent=&active=): the sessions of one agent (an
// agent-role token: its own; an admin: every agent's, or one), each under the session
// that spawned it (sessionTree: the registry's parent, else its child_spawned event),
// with its pending state from the live notice feed: the notices it holds as a watcher
// (it is stale, and for how long) and the watchers waiting to reconcile it. A collapsed
// node sums its subtree. The tree reloads when sessions log events; the pending state
// follows the feed.

import { h, fill, sessionLink, watcherHref, keyText, throttle } from '../dom.js';
import { gql } from '../gql.js';
import { ageEl, refreshAges } from './components.js';
import { agentNote } from './home.js';

const ACTIVE = [['', 'any time'], ['60', 'the last hour'], ['1440', 'the last day'], ['10080', 'the last week']];

export function treeView(root, { notices, panels, bus, viewer, query }) {
  const cleanups = [];
  const own = viewer.agent();
  const agentIn = h('input', {
    type: 'text', id: 't-agent', name: 'agent', value: own || query.get('agent') || '', placeholder: 'every agent',
    autocomplete: 'off', spellcheck: 'false', readonly: !!own, 'data-filter': '',
    title: own ? `This token reads the sessions of agent ${own} only` : null,
  });
  const activeIn = h('select', { id: 't-active', name: 'active' },
    ACTIVE.map(([v, label]) => h('option', { value: v, selected: (query.get('active') || '') === v }, label)));
  const form = h('form', { class: 'form', role: 'search', 'aria-label': 'Which sessions' },
    h('div', { class: 'field narrow' }, h('label', { for: 't-agent' }, 'Agent'), agentIn),
    h('div', { class: 'field narrow' }, h('label', { for: 't-active' }, 'Updated in'), activeIn),
    h('div', { class: 'form-actions' }, h('button', { type: 'submit', class: 'primary' }, 'Show')));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const p = new URLSearchParams();
    if (!own && agentIn.value.trim()) p.set('agent', agentIn.value.trim().toLowerCase());
    if (activeIn.value) p.set('active', activeIn.value);
    location.hash = `#/tree${p.toString() ? `?${p}` : ''}`;
  });

  const body = h('div', { id: 'tree' }, h('p', { class: 'skeleton' }, 'Loading…'));
  const count = h('span', { class: 'hint', id: 'tree-count' });
  const expand = h('button', { type: 'button', id: 'tree-expand' }, 'Expand all');
  const collapse = h('button', { type: 'button', id: 'tree-collapse' }, 'Collapse all');
  const head = h('div', { class: 'panel-head' }, h('h2', { id: 'tree-h', tabindex: '-1' }, 'Sessions by parent'),
    count, h('span', { class: 'btns' }, expand, collapse));
  const panel = h('section', { class: 'panel', id: 'tree-panel', 'aria-labelledby': 'tree-h' }, head, body);
  const collapsed = new Set(); // node ids the person closed
  let nodes = [];
  let truncated = false;

  const load = async () => {
    const vars = { agentId: own ? null : (query.get('agent') || null), active: query.get('active') ? Number(query.get('active')) : null };
    const d = await gql(`query Tree($agentId: String, $active: Int) { sessionTree(agentId: $agentId, activeMinutes: $active) {
      truncated nodes { sessionKey agentId kind displayName stateVersion updatedAt parentSessionKey parentAgentId } } }`, vars);
    nodes = d.sessionTree.nodes;
    truncated = d.sessionTree.truncated;
    paint();
  };

  const idOf = (agentId, key) => `${agentId}|${key}`; // agent ids have no '|' (KEY-4)
  const stateOf = (n) => {
    const held = notices.forWatcher(n.sessionKey).filter(() => n.sessionKey.startsWith('agent:'));
    const about = notices.aboutTarget(n.agentId, n.sessionKey);
    let oldest = null;
    for (const x of held) if (!oldest || x.openedAt < oldest.openedAt) oldest = x;
    return { held, about, oldest };
  };

  const paint = () => {
    if (!nodes.length) {
      fill(body, h('p', { class: 'empty', dataset: { treeEmpty: '' } },
        'No session here yet. A manager’s sub-agents appear under it once child_spawned is recorded for them (or the registry names their parent).'));
      fill(count);
      return;
    }
    const byId = new Map(nodes.map((n) => [idOf(n.agentId, n.sessionKey), { n, kids: [] }]));
    const roots = [];
    for (const e of byId.values()) {
      const p = e.n.parentSessionKey ? byId.get(idOf(e.n.parentAgentId, e.n.parentSessionKey)) : null;
      if (p && p !== e) p.kids.push(e); else roots.push(e);
    }
    // Siblings with the most pending in their subtree first, then by key.
    const sum = new Map();
    const total = (e) => {
      if (sum.has(e)) return sum.get(e);
      const st = stateOf(e.n);
      sum.set(e, 0); // a cycle (a misrecorded lineage) counts once
      const v = st.held.length + e.kids.reduce((a, k) => a + total(k), 0);
      sum.set(e, v);
      return v;
    };
    const seen = new Set();
    const item = (e, depth) => {
      if (seen.has(e)) return null;
      seen.add(e);
      const n = e.n;
      const st = stateOf(n);
      const id = idOf(n.agentId, n.sessionKey);
      const line = h('div', { class: 'node', dataset: { key: n.sessionKey, agent: n.agentId, held: st.held.length, about: st.about.length } },
        sessionLink(n.sessionKey, n.agentId),
        h('span', { class: 'badge accent' }, n.kind),
        n.displayName ? h('span', { class: 'small muted' }, n.displayName) : null,
        h('span', { class: 'small muted', title: 'state version' }, n.stateVersion == null ? 'no events' : `v${n.stateVersion}`),
        st.held.length
          ? h('a', { class: 'badge wake', href: watcherHref(n.sessionKey), dataset: { stale: '' }, title: `${n.sessionKey} has ${st.held.length} pending notice(s): it is stale` },
            `stale · ${st.held.length} pending · `, ageEl(st.oldest.openedAt))
          : n.sessionKey.startsWith('agent:') && notices.known() ? h('span', { class: 'badge ok', dataset: { inSync: '' } }, 'in sync') : null,
        st.about.length ? h('span', { class: 'badge info', title: `${st.about.map((x) => x.watcher).join(', ')} wait to reconcile it` },
          `${st.about.length} watcher${st.about.length === 1 ? '' : 's'} waiting`) : null,
        !e.kids.length || !collapsed.has(id) ? null
          : h('span', { class: 'small muted', dataset: { subtree: total(e) } }, `${e.kids.length} below · ${total(e) - st.held.length} pending below`),
        n.parentSessionKey && depth === 0 ? h('span', { class: 'small muted' }, 'spawned by ', h('span', { class: 'mono' }, keyText(n.parentSessionKey)), ' (not listed)') : null);
      if (!e.kids.length) return h('li', null, line);
      const kids = e.kids.slice().sort((a, b) => total(b) - total(a) || (a.n.sessionKey < b.n.sessionKey ? -1 : 1));
      const det = h('details', { open: !collapsed.has(id), dataset: { id } },
        h('summary', { 'aria-label': `${n.sessionKey}: ${e.kids.length} sub-session${e.kids.length === 1 ? '' : 's'}` }, line),
        h('ul', { class: 'tree' }, kids.map((k) => item(k, depth + 1))));
      det.addEventListener('toggle', () => {
        // Also fired for the open attribute set here: only the person's toggle counts.
        if (det.open === !collapsed.has(id)) return;
        if (det.open) collapsed.delete(id); else collapsed.add(id);
        paint();
      });
      return h('li', null, det);
    };
    roots.sort((a, b) => total(b) - total(a) || (a.n.agentId + a.n.sessionKey < b.n.agentId + b.n.sessionKey ? -1 : 1));
    const focused = body.contains(document.activeElement) ? document.activeElement.getAttribute('href') || document.activeElement.closest('details')?.dataset.id : null;
    fill(body, h('ul', { class: 'tree root', 'aria-label': 'Sessions under the sessions that spawned them' }, roots.map((r) => item(r, 0))),
      truncated ? h('p', { class: 'small muted' }, 'Only the first 500 sessions are shown: narrow by agent or by time.') : null);
    fill(count, `${nodes.length} session${nodes.length === 1 ? '' : 's'}, ${roots.length} root${roots.length === 1 ? '' : 's'}`);
    if (focused) {
      const el = body.querySelector(`a[href="${CSS.escape(focused)}"]`) || body.querySelector(`details[data-id="${CSS.escape(focused)}"] > summary`);
      if (el) el.focus();
    }
  };

  expand.addEventListener('click', () => { collapsed.clear(); paint(); });
  collapse.addEventListener('click', () => {
    for (const d of body.querySelectorAll('details')) collapsed.add(d.dataset.id);
    paint();
  });

  const p = panels.add(panel, head, load, 'the session tree');
  const soon = throttle(() => p.run(), 2000);
  const onEvent = () => soon();
  bus.addEventListener('event', onEvent);
  const repaint = throttle(() => { if (nodes.length) paint(); }, 300);
  notices.addEventListener('change', repaint);
  const tick = setInterval(() => refreshAges(body), 5000);
  cleanups.push(() => {
    bus.removeEventListener('event', onEvent); notices.removeEventListener('change', repaint);
    soon.cancel(); repaint.cancel(); clearInterval(tick); p.remove();
  });

  fill(root,
    h('div', { class: 'page-head' },
      h('div', null,
        h('h1', { tabindex: '-1' }, 'Session tree'),
        h('p', { class: 'sub' }, 'Managers and the sub-agents they spawned, with who is stale (pending notices it holds) and who waits to reconcile whom.'),
        agentNote(viewer))),
    h('section', { class: 'panel', 'aria-label': 'Which sessions', style: 'margin-bottom:1rem' }, form),
    panel);
  return () => cleanups.forEach((fn) => fn());
}
