// Who is stale, and for how long (#/stale): from the live notice feed, every watcher
// with a pending notice, the oldest first — how many notices it holds, how long its
// oldest has waited and on which target (with Reconcile) — and the same per agent.
// The ages tick; the lists follow the feed as notices open and close.

import { h, fill, sessionHref, watcherHref, agentOf, keyText, sessionLink } from '../dom.js';
import { noticePanel, ageEl, refreshAges } from './components.js';
import { agentNote } from './home.js';

/** staleness groups pending notices by watcher and by the watcher's agent, oldest first. */
export function staleness(list) {
  const byWatcher = new Map();
  for (const n of list) {
    let w = byWatcher.get(n.watcher);
    if (!w) byWatcher.set(n.watcher, w = { watcher: n.watcher, agent: agentOf(n.watcher), notices: [], oldest: n, wake: false });
    w.notices.push(n);
    if (n.openedAt < w.oldest.openedAt) w.oldest = n;
    w.wake = w.wake || n.wake;
  }
  const watchers = [...byWatcher.values()].sort((a, b) => (a.oldest.openedAt < b.oldest.openedAt ? -1 : a.oldest.openedAt > b.oldest.openedAt ? 1 : 0));
  const byAgent = new Map();
  for (const w of watchers) {
    let a = byAgent.get(w.agent);
    if (!a) byAgent.set(w.agent, a = { agent: w.agent, watchers: 0, pending: 0, oldest: w });
    a.watchers++;
    a.pending += w.notices.length;
  }
  return { watchers, agents: [...byAgent.values()] }; // agents keep the watchers' order: oldest first
}

export function staleView(root, { notices, panels, auth, viewer }) {
  const cleanups = [];
  const summary = h('p', { class: 'sub', id: 'stale-summary', role: 'status' });
  const wBody = h('div', { id: 'stale-watchers' });
  const aBody = h('div', { id: 'stale-agents' });
  const wHead = h('div', { class: 'panel-head' }, h('h2', { id: 'sw-h', tabindex: '-1' }, 'Watchers waiting'),
    h('span', { class: 'hint' }, 'the longest wait first'));
  const aHead = h('div', { class: 'panel-head' }, h('h2', { id: 'sa-h' }, 'Agents'),
    h('span', { class: 'hint' }, 'their watchers’ oldest notice'));
  const wPanel = h('section', { class: 'panel', id: 'stale-watchers-panel', 'aria-labelledby': 'sw-h' }, wHead, wBody);
  const aPanel = h('section', { class: 'panel', id: 'stale-agents-panel', 'aria-labelledby': 'sa-h' }, aHead, aBody);

  const render = () => {
    if (!notices.known()) {
      fill(summary, 'Who is stale is not known until the live feed is back.');
      fill(wBody, h('p', { class: 'empty', dataset: { noticesUnknown: '' } }));
      fill(aBody);
      return;
    }
    const { watchers, agents } = staleness(notices.list());
    if (!watchers.length) {
      fill(summary, 'Nobody is stale: no watcher has a pending notice.');
      fill(wBody, h('p', { class: 'empty', dataset: { emptyStale: '' } }, 'Every watcher has acknowledged what changed. A watcher shows here, with how long it has waited, as soon as a notice opens for it.'));
      fill(aBody, h('p', { class: 'empty' }, 'No agent has a stale watcher.'));
      return;
    }
    const pending = watchers.reduce((a, w) => a + w.notices.length, 0);
    fill(summary, `${watchers.length} watcher${watchers.length === 1 ? '' : 's'} of ${agents.length} agent${agents.length === 1 ? '' : 's'} stale, ${pending} notice${pending === 1 ? '' : 's'} pending; the longest has waited `, ageEl(watchers[0].oldest.openedAt), '.');
    fill(wBody, h('div', { class: 'table-wrap' }, h('table', { class: 'stacked', dataset: { stale: 'watchers' } },
      h('caption', { class: 'visually-hidden' }, 'Stale watchers, the longest wait first'),
      h('thead', null, h('tr', null,
        h('th', { scope: 'col' }, 'Watcher'), h('th', { scope: 'col', class: 'num' }, 'Pending'),
        h('th', { scope: 'col' }, 'Oldest waits'), h('th', { scope: 'col' }, 'On'))),
      h('tbody', null, watchers.map((w) => h('tr', { dataset: { watcher: w.watcher, pending: w.notices.length, oldestOpened: w.oldest.openedAt } },
        h('td', null, h('a', { class: 'key', href: watcherHref(w.watcher), title: `Everything ${w.watcher} waits on` }, keyText(w.watcher)),
          w.wake ? [' ', h('span', { class: 'badge wake', title: 'A main-session watcher: its gateway should run a turn now (NTC-6)' }, 'wake')] : null),
        h('td', { class: 'num', 'data-label': 'pending' }, w.notices.length),
        h('td', { 'data-label': 'oldest waits' }, ageEl(w.oldest.openedAt)),
        h('td', null, sessionLink(w.oldest.target, w.oldest.targetAgentId), ' ',
          h('a', { class: 'btn small reconcile', href: sessionHref(w.oldest.targetAgentId, w.oldest.target, { since: w.oldest.changesSince, watcher: w.watcher }),
            'aria-label': `Reconcile ${w.oldest.target} for ${w.watcher}` }, 'Reconcile'))))))));
    fill(aBody, h('div', { class: 'table-wrap' }, h('table', { class: 'stacked', dataset: { stale: 'agents' } },
      h('caption', { class: 'visually-hidden' }, 'Agents with stale watchers, the longest wait first'),
      h('thead', null, h('tr', null,
        h('th', { scope: 'col' }, 'Agent'), h('th', { scope: 'col', class: 'num' }, 'Watchers'),
        h('th', { scope: 'col', class: 'num' }, 'Pending'), h('th', { scope: 'col' }, 'Oldest waits'))),
      h('tbody', null, agents.map((a) => h('tr', { dataset: { agent: a.agent, watchers: a.watchers, pending: a.pending } },
        h('td', null, h('span', { class: 'mono' }, a.agent),
          h('div', { class: 'small muted' }, 'longest: ', h('a', { class: 'key', href: watcherHref(a.oldest.watcher) }, keyText(a.oldest.watcher)))),
        h('td', { class: 'num', 'data-label': 'watchers' }, a.watchers),
        h('td', { class: 'num', 'data-label': 'pending' }, a.pending),
        h('td', { 'data-label': 'oldest waits' }, ageEl(a.oldest.oldest.openedAt))))))));
  };
  notices.addEventListener('change', render);
  auth.addEventListener('change', render);
  const tick = setInterval(() => refreshAges(root), 5000);
  cleanups.push(() => { notices.removeEventListener('change', render); auth.removeEventListener('change', render); clearInterval(tick); });
  noticePanel(panels, notices, wPanel, wHead, 'who is stale', cleanups);
  noticePanel(panels, notices, aPanel, aHead, 'the agents', cleanups);

  fill(root,
    h('div', { class: 'page-head' },
      h('div', null,
        h('h1', { tabindex: '-1' }, 'Who is stale'),
        summary,
        agentNote(viewer))),
    h('div', { class: 'stack' }, wPanel, aPanel));
  render();
  return () => cleanups.forEach((fn) => fn());
}
