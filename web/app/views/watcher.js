// One watcher (#/watcher/<sessionKey>): everything it waits on — its pending notices,
// with bulk Acknowledge (the exact form: each selected notice is named by its
// notifiedVersion) — its cursors on every target, and who acknowledged its notices.

import { h, fill, sessionLink, sessionHref, agentOf, keyText, timeEl, toast, throttle } from '../dom.js';
import { gql, errorText, CURSOR_FIELDS } from '../gql.js';
import { noticeList, noNotices, noticePanel, ackToast, forbiddenPage, ackTable, ACK_FIELDS } from './components.js';

export function watcherView(root, { key, notices, bus, panels, auth, viewer }) {
  const cleanups = [];
  if (!viewer.mayRead(agentOf(key))) {
    fill(root, forbiddenPage(viewer, `the notices of the watcher ${key}`,
      h('div', { class: 'crumbs' }, h('a', { href: '#/' }, 'Notices'), ' / watcher'), keyText(key)));
    return () => {};
  }
  const count = h('span', { class: 'count', 'aria-label': 'pending notices' }, '0');
  const list = h('div', { class: 'notices', id: 'watcher-notices', 'aria-live': 'polite' });
  const ackSel = h('button', { type: 'button', id: 'ack-selected' }, 'Acknowledge selected');
  const ackAll = h('button', { type: 'button', class: 'primary', id: 'ack-all' }, 'Acknowledge all');
  const selectAll = h('input', { type: 'checkbox', id: 'select-all' });
  const bar = h('div', { class: 'bulk-bar' },
    h('label', { class: 'chip' }, selectAll, 'Select all'), ackSel, ackAll);
  const head = h('div', { class: 'panel-head' },
    h('h2', { id: 'wn-h', tabindex: '-1' }, 'What it waits on', count),
    h('span', { class: 'hint' }, 'pending notices of this watcher'));
  const panel = h('section', { class: 'panel', id: 'watcher-panel', 'aria-labelledby': 'wn-h' }, head, bar, list);
  const cursorsBody = h('div', null, h('p', { class: 'skeleton' }, 'Loading…'));
  const cursorsHead = h('div', { class: 'panel-head' }, h('h2', { id: 'wc-h' }, 'Its cursors'), h('span', { class: 'hint' }, 'every target it watches'));
  const cursorsPanel = h('section', { class: 'panel', id: 'watcher-cursors', 'aria-labelledby': 'wc-h' }, cursorsHead, cursorsBody);

  const mine = () => notices.forWatcher(key);
  const paint = noticeList(list, notices, mine, () => noNotices(notices, auth,
    'Nothing to wait on: this watcher has no pending notice. Its notices appear here live as watched sessions change.'), { select: true });
  const render = () => {
    const ns = paint();
    fill(count, ns.length);
    count.classList.toggle('hot', ns.length > 0);
    bar.hidden = ns.length === 0;
    fill(ackAll, ns.length > 1 ? `Acknowledge all ${ns.length}` : 'Acknowledge all');
  };
  notices.addEventListener('change', render);
  auth.addEventListener('change', render);
  cleanups.push(() => { notices.removeEventListener('change', render); auth.removeEventListener('change', render); });
  selectAll.addEventListener('change', () => {
    for (const b of list.querySelectorAll('input.pick')) b.checked = selectAll.checked;
  });

  const selected = () => {
    const picked = new Set([...list.querySelectorAll('.notice')].filter((c) => c.querySelector('input.pick:checked'))
      .map((c) => `${c.dataset.targetAgent}\u0000${c.dataset.target}\u0000${c.dataset.version}`));
    return mine().filter((n) => picked.has(`${n.targetAgentId}\u0000${n.target}\u0000${n.notifiedVersion}`));
  };
  const bulk = async (btn, ns) => {
    if (!ns.length) { toast('Select the notices to acknowledge first.'); return; }
    btn.setAttribute('aria-disabled', 'true');
    try {
      ackToast(await notices.ack(key, ns), ns);
      selectAll.checked = false;
    } catch (err) {
      toast(`Acknowledge failed: ${errorText(err)}`, 'bad');
    } finally {
      btn.removeAttribute('aria-disabled');
    }
    if (!list.contains(document.activeElement)) (list.querySelector('button.ack') || document.getElementById('wn-h')).focus();
  };
  ackSel.addEventListener('click', () => bulk(ackSel, selected()));
  ackAll.addEventListener('click', () => bulk(ackAll, mine()));

  noticePanel(panels, notices, panel, head, 'the notices of this watcher', cleanups);
  const load = async () => {
    const d = await gql(`query Held($key: String!) { watches(watcher: $key) { ${CURSOR_FIELDS} } }`, { key });
    fill(cursorsBody, d.watches.length ? h('div', { class: 'table-wrap' }, h('table', { class: 'stacked', dataset: { cursors: 'target' } },
      h('thead', null, h('tr', null, h('th', null, 'Target'), h('th', { class: 'num' }, 'L'), h('th', { class: 'num' }, 'N'),
        h('th', { class: 'num' }, 'M'), h('th', null, 'State'))),
      h('tbody', null, d.watches.map((c) => h('tr', { dataset: { target: c.target } },
        h('td', null, sessionLink(c.target, c.targetAgentId), h('div', { class: 'small muted' }, 'touched ', timeEl(c.updatedAt))),
        h('td', { class: 'num', 'data-label': 'L' }, c.lastAcked),
        h('td', { class: 'num', 'data-label': 'N' }, c.notified),
        h('td', { class: 'num', 'data-label': 'M' }, c.material),
        h('td', null, c.pending ? h('span', { class: 'badge wake' }, 'notice pending')
          : c.material > c.lastAcked ? h('span', { class: 'badge info' }, 'changed') : h('span', { class: 'badge ok' }, 'in sync')))))))
      : h('p', { class: 'empty' }, 'This watcher holds no cursor. A gateway registers one with watch, or child_spawned seeds one for the parent.'));
  };
  const cp = panels.add(cursorsPanel, cursorsHead, load, 'its cursors');
  const onEvent = () => cp.run();
  bus.addEventListener('event', onEvent);
  cleanups.push(() => { cp.remove(); bus.removeEventListener('event', onEvent); });

  // Who acknowledged its notices, and from where.
  const acksBody = h('div', null, h('p', { class: 'skeleton' }, 'Loading…'));
  const acksHead = h('div', { class: 'panel-head' }, h('h2', { id: 'wa-h' }, 'Acknowledged'),
    h('a', { class: 'small', href: `#/acks?watcher=${encodeURIComponent(key)}` }, 'full history'));
  const acksPanel = h('section', { class: 'panel', id: 'watcher-acks', 'aria-labelledby': 'wa-h' }, acksHead, acksBody);
  const ap = panels.add(acksPanel, acksHead, async () => {
    const d = await gql(`query WatcherAcks($w: String!) { ackHistory(watcher: $w, first: 10) { records { ${ACK_FIELDS} } } }`, { w: key });
    const rs = d.ackHistory.records;
    fill(acksBody, rs.length ? ackTable(rs, { showWatcher: false })
      : h('p', { class: 'empty', dataset: { acksEmpty: '' } }, 'No notice of this watcher was acknowledged within the log’s retention.'));
  }, 'its acknowledgements');
  const acksSoon = throttle(() => ap.run(), 1000);
  notices.addEventListener('change', acksSoon);
  cleanups.push(() => { ap.remove(); acksSoon.cancel(); notices.removeEventListener('change', acksSoon); });

  fill(root,
    h('div', { class: 'crumbs' }, h('a', { href: '#/' }, 'Notices'), ' / watcher'),
    h('div', { class: 'page-head' },
      h('div', null,
        h('h1', { tabindex: '-1' }, keyText(key)),
        h('p', { class: 'sub' }, 'Everything this watcher waits on. ',
          h('a', { href: sessionHref(agentOf(key), key) }, 'Its session page'), '.'))),
    h('div', { class: 'grid' },
      h('div', { class: 'stack' }, panel),
      h('div', { class: 'stack' }, cursorsPanel, acksPanel)));
  render();
  return () => cleanups.forEach((fn) => fn());
}
