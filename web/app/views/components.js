// Components shared by several views: the notice card and the upstream links panel.

import { h, fill, sessionLink, sessionHref, timeEl, toast, agentOf } from '../dom.js';
import { gql, errorText } from '../gql.js';

/**
 * noticeCard renders one pending stale notice: watcher and target, the exact notice
 * text (NTC-1), the wake flag (NTC-6), L/N/M, and an Acknowledge button (NTC-3).
 */
export function noticeCard(n, store) {
  const moved = n.currentMaterial > n.materialVersion;
  const ackBtn = h('button', {
    type: 'button', class: 'primary ack',
    'aria-label': `Acknowledge the notice of ${n.watcher} about ${n.target}`,
  }, 'Acknowledge');
  const card = h('article', {
    class: `notice${n.fresh ? ' fresh' : ''}`,
    dataset: { watcher: n.watcher, target: n.target, targetAgent: n.targetAgentId },
    'aria-label': `Notice for ${n.watcher} about ${n.target}`,
  },
  h('div', { class: 'notice-head' },
    sessionLink(n.watcher, agentOf(n.watcher)),
    h('span', { class: 'arrow', 'aria-hidden': 'true' }, '→'),
    h('span', { class: 'visually-hidden' }, 'is stale about'),
    sessionLink(n.target, n.targetAgentId),
    n.wake
      ? h('span', { class: 'badge wake', title: 'Main-session watcher: the gateway should run a turn now (NTC-6)' }, 'wake')
      : h('span', { class: 'badge', title: 'Sub-agent watcher: it sees the notice on its next turn (NTC-6)' }, 'no wake')),
  h('pre', { class: 'notice-text', 'aria-label': 'Notice text' }, n.text),
  h('dl', { class: 'lnm' },
    h('div', { title: 'L: last acknowledged; reconcile with changesSince L' }, h('dt', null, 'L'), h('dd', null, n.changesSince)),
    h('div', { title: 'N: the frozen watermark this notice covers' }, h('dt', null, 'N'), h('dd', null, n.notifiedVersion)),
    h('div', { title: moved ? `M: ${n.materialVersion} when the notice opened, ${n.currentMaterial} now` : 'M: the latest material change' },
      h('dt', null, 'M'),
      h('dd', { class: moved ? 'moved' : null }, moved ? `${n.currentMaterial}` : n.materialVersion))),
  h('div', { class: 'notice-foot' },
    h('span', null, 'opened ', timeEl(n.openedAt)),
    h('span', { class: 'actions' },
      h('a', { class: 'btn', href: sessionHref(n.targetAgentId, n.target, { since: n.changesSince }) }, 'Reconcile'),
      ackBtn)));
  if (n.fresh) setTimeout(() => card.classList.remove('fresh'), 2500);
  ackBtn.addEventListener('click', async () => {
    ackBtn.disabled = true;
    card.classList.add('leaving');
    try {
      const follow = await store.ack(n);
      toast(follow.length
        ? `Acknowledged. ${follow.length} follow-up notice opened for changes after #${n.notifiedVersion}.`
        : `Acknowledged ${n.target} for ${n.watcher}.`);
    } catch (err) {
      card.classList.remove('leaving');
      ackBtn.disabled = false;
      toast(`Acknowledge failed: ${errorText(err)}`, 'bad');
    }
  });
  return card;
}

/**
 * upstreamPanel lists adopted sessions' upstream links and their health (UPS-*),
 * all of them or those of one session: marker, misses, last check and blocked reason.
 */
export function upstreamPanel({ agentId, sessionKey } = {}) {
  const body = h('div', null, h('p', { class: 'skeleton' }, 'Loading…'));
  const panel = h('section', { class: 'panel', 'aria-labelledby': 'upstream-h' },
    h('div', { class: 'panel-head' },
      h('h2', { id: 'upstream-h' }, 'Upstream links'),
      h('span', { class: 'hint' }, 'adopted sessions and their health')),
    body);
  const load = async () => {
    try {
      const d = await gql(`query Links($agentId: String) { upstreamLinks(agentId: $agentId) {
        sessionKey agentId catalogId threadId marker consecutiveMisses lastCheckedAt blockedReason } }`,
      { agentId: agentId || null });
      let links = d.upstreamLinks;
      if (sessionKey) links = links.filter((l) => l.sessionKey === sessionKey);
      if (!links.length) {
        fill(body, h('p', { class: 'empty', dataset: { upstreamEmpty: '' } },
          sessionKey ? 'This session is not adopted from a catalog.' : 'No adopted sessions.'));
        return;
      }
      fill(body, h('div', { class: 'table-wrap' }, h('table', { class: 'stacked' },
        h('thead', null, h('tr', null,
          h('th', null, 'Session'), h('th', null, 'Catalog / thread'), h('th', null, 'Health'),
          h('th', { class: 'num hide-sm' }, 'Marker'), h('th', { class: 'hide-sm' }, 'Checked'))),
        h('tbody', null, links.map((l) => h('tr', null,
          h('td', null, sessionLink(l.sessionKey, l.agentId)),
          h('td', null, h('span', { class: 'mono' }, l.catalogId), ' / ', h('span', { class: 'mono' }, l.threadId)),
          h('td', null, linkHealth(l)),
          h('td', { class: 'num hide-sm', 'data-label': 'marker' }, `${l.marker} B`),
          h('td', { class: 'hide-sm' }, l.lastCheckedAt ? timeEl(l.lastCheckedAt) : 'not yet')))))));
    } catch (err) {
      fill(body, h('p', { class: 'empty' }, `Could not load upstream links: ${errorText(err)}`));
    }
  };
  load();
  return { el: panel, reload: load };
}

function linkHealth(l) {
  if (l.blockedReason) return h('span', { class: 'badge bad', title: l.blockedReason }, 'blocked: ', l.blockedReason);
  if (l.consecutiveMisses > 0) return h('span', { class: 'badge wake' }, `missing ${l.consecutiveMisses}/3`);
  return h('span', { class: 'badge ok' }, 'healthy');
}
