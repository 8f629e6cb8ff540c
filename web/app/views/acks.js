// The acknowledgement history (#/acks?watcher=&target=&agent=): every acknowledged
// notice, newest first, with when, which notice (watcher → target, L → N), how long it
// had waited, how it was named, who acknowledged it (the token's name and role) and
// from which client (transport and client name), kept as long as the log's retention.
// The first page follows the live feed (an acknowledgement closes a notice); older
// pages load on demand.

import { h, fill, throttle } from '../dom.js';
import { gql } from '../gql.js';
import { ackTable, ACK_FIELDS } from './components.js';
import { agentNote } from './home.js';

const PAGE = 50;

export function acksView(root, { notices, panels, viewer, query }) {
  const cleanups = [];
  const own = viewer.agent();
  const f = { watcher: query.get('watcher') || '', target: query.get('target') || '', agent: own ? '' : (query.get('agent') || '') };
  const input = (id, name, value, placeholder, label) => [h('label', { for: id }, label),
    h('input', { type: 'text', id, name, value, placeholder, autocomplete: 'off', spellcheck: 'false' })];
  const form = h('form', { class: 'form', role: 'search', 'aria-label': 'Filter the history' },
    h('div', { class: 'field' }, input('h-watcher', 'watcher', f.watcher, 'agent:main:main', 'Watcher')),
    h('div', { class: 'field' }, input('h-target', 'target', f.target, 'agent:main:subagent:…', 'Target')),
    own ? null : h('div', { class: 'field narrow' }, input('h-agent', 'agent', f.agent, 'any', 'Agent')),
    h('div', { class: 'form-actions' },
      h('button', { type: 'submit', class: 'primary' }, 'Apply'),
      h('button', { type: 'button', onclick: () => { location.hash = '#/acks'; } }, 'Clear')));
  form.querySelector('input').setAttribute('data-filter', '');
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const p = new URLSearchParams();
    for (const n of ['watcher', 'target', 'agent']) {
      const el = form.elements.namedItem(n);
      if (el && el.value.trim()) p.set(n, el.value.trim());
    }
    location.hash = `#/acks${p.toString() ? `?${p}` : ''}`;
  });

  const body = h('div', { id: 'ack-history' }, h('p', { class: 'skeleton' }, 'Loading…'));
  const older = h('button', { type: 'button', id: 'acks-older', hidden: true }, 'Load older');
  const note = h('p', { class: 'small muted', id: 'acks-note' });
  const head = h('div', { class: 'panel-head' }, h('h2', { id: 'acks-h', tabindex: '-1' }, 'Acknowledged notices'),
    h('span', { class: 'hint' }, 'newest first'));
  const panel = h('section', { class: 'panel', id: 'acks-panel', 'aria-labelledby': 'acks-h' }, head, body, note, older);

  let records = [];
  let cursor = null; // the endCursor of the last page loaded
  const vars = (after) => ({
    w: f.watcher || null, t: f.target || null, a: f.agent || null, first: PAGE, after,
  });
  const read = async (after) => {
    const d = await gql(`query Acks($w: String, $t: String, $a: String, $first: Int, $after: String) {
      ackHistory(watcher: $w, target: $t, agentId: $a, first: $first, after: $after) {
        records { ${ACK_FIELDS} } pageInfo { hasNextPage endCursor } } }`, vars(after));
    return d.ackHistory;
  };
  const ident = (r) => `${r.watcher}\u0000${r.targetAgentId}\u0000${r.target}\u0000${r.notifiedVersion}\u0000${r.acknowledgedAt}`;
  const paint = () => {
    if (!records.length) {
      fill(body, h('p', { class: 'empty', dataset: { acksEmpty: '' } },
        f.watcher || f.target || f.agent ? 'No acknowledgement matches, within the log’s retention.'
          : 'No notice was acknowledged yet (within the log’s retention). Each Acknowledge, here or from a gateway (ackNotices), shows here with who sent it.'));
    } else {
      fill(body, ackTable(records));
    }
    older.hidden = !cursor;
    const by = new Set(records.map((r) => r.principal || '(no token)'));
    fill(note, records.length ? `${records.length} shown${cursor ? ', older ones follow' : ''}; by ${[...by].join(', ')}.` : '');
  };
  // The first page again, merged in front of what is loaded (the live part).
  const load = async () => {
    const page = await read(null);
    if (!records.length) {
      records = page.records;
      cursor = page.pageInfo.hasNextPage ? page.pageInfo.endCursor : null;
    } else {
      const have = new Set(records.map(ident));
      const fresh = page.records.filter((r) => !have.has(ident(r)));
      // Records pruned or deleted since leave: keep the loaded ones the first page still
      // reaches, and the older pages as they were.
      const first = new Set(page.records.map(ident));
      const oldest = page.records.length ? page.records[page.records.length - 1].acknowledgedAt : '';
      records = [...fresh, ...records.filter((r) => first.has(ident(r)) || r.acknowledgedAt < oldest)];
      if (!page.pageInfo.hasNextPage) cursor = null;
    }
    paint();
  };
  older.addEventListener('click', async () => {
    older.setAttribute('aria-disabled', 'true');
    try {
      const page = await read(cursor);
      records = [...records, ...page.records];
      cursor = page.pageInfo.hasNextPage ? page.pageInfo.endCursor : null;
      paint();
    } finally {
      older.removeAttribute('aria-disabled');
    }
  });
  const p = panels.add(panel, head, load, 'the acknowledgement history');
  const soon = throttle(() => p.run(), 800);
  notices.addEventListener('change', soon);
  cleanups.push(() => { notices.removeEventListener('change', soon); soon.cancel(); p.remove(); });

  fill(root,
    h('div', { class: 'page-head' },
      h('div', null,
        h('h1', { tabindex: '-1' }, 'Acknowledgement history'),
        h('p', { class: 'sub' }, 'Who acknowledged which notice, when, and from which client. Kept as long as the log’s retention.'),
        agentNote(viewer))),
    h('section', { class: 'panel', 'aria-label': 'Filters', style: 'margin-bottom:1rem' }, form),
    panel);
  return () => cleanups.forEach((fn) => fn());
}
