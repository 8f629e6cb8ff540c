// One session (#/session/<agentId>/<sessionKey>[?since=L]): its live event timeline
// (sessionStatus + stateEvents), the history gap when the log was pruned (REC-2), the
// watchers on it and the targets it watches with their cursors, its pending notices
// with Acknowledge, a watch/unwatch form, and its upstream link.

import { h, fill, eventItem, sessionLink, sessionHref, timeEl, throttle, toast, isQualified, agentOf, keyText } from '../dom.js';
import { gql, errorText, EVENT_FIELDS, CURSOR_FIELDS } from '../gql.js';
import { noticeCard, upstreamPanel } from './components.js';

const PAGE = 50;

export function sessionView(root, { agentId, key, query, notices, bus, live }) {
  const cleanups = [];
  const qualified = isQualified(key);
  const sinceParam = query.has('since') && /^\d+$/.test(query.get('since')) ? Number(query.get('since')) : null;

  // Header.
  const title = h('h1', { tabindex: '-1' }, keyText(key));
  const sub = h('p', { class: 'sub' }, `agent ${agentId}`);
  const facts = h('dl', { class: 'facts' });
  const headBadges = h('div', { class: 'chips' });

  // Timeline.
  const banner = h('div');
  const timeline = h('ol', { class: 'timeline', id: 'timeline', 'aria-live': 'polite', 'aria-label': 'Events, newest first' });
  const older = h('button', { type: 'button', hidden: true }, 'Load older events');
  const sinceInput = h('input', { type: 'number', min: '0', id: 'since', placeholder: 'L', value: sinceParam ?? '', 'aria-label': 'changesSince' });
  const sinceForm = h('form', { class: 'form', style: 'gap:.4rem;flex-wrap:nowrap' },
    h('div', { class: 'field narrow', style: 'flex-basis:5.5rem' }, sinceInput),
    h('button', { type: 'submit' }, 'Changes since'));
  sinceForm.addEventListener('submit', (e) => {
    e.preventDefault();
    const v = sinceInput.value.trim();
    location.hash = sessionHref(agentId, key, /^\d+$/.test(v) ? { since: v } : null);
  });
  const timelinePanel = h('section', { class: 'panel', 'aria-labelledby': 'timeline-h' },
    h('div', { class: 'panel-head' },
      h('h2', { id: 'timeline-h' }, 'Timeline ', h('span', { class: 'hint' }, 'live')),
      sinceForm),
    banner, timeline, h('div', { style: 'margin-top:.75rem' }, older));

  // Notices, watchers, targets, form.
  const result = h('p', { class: 'form-result', role: 'status', id: 'watch-result' });
  const noticeList = h('div', { class: 'notices', id: 'session-notices' });
  const ackAll = h('button', { type: 'button', hidden: true }, 'Acknowledge all');
  const noticesPanel = h('section', { class: 'panel', 'aria-labelledby': 'sn-h' },
    h('div', { class: 'panel-head' }, h('h2', { id: 'sn-h' }, 'Pending notices for this session'), ackAll),
    noticeList);
  const watchersBody = h('div', null, h('p', { class: 'skeleton' }, 'Loading…'));
  const targetsBody = h('div', null, h('p', { class: 'skeleton' }, 'Loading…'));
  const watchersPanel = h('section', { class: 'panel', 'aria-labelledby': 'w-h' },
    h('div', { class: 'panel-head' }, h('h2', { id: 'w-h' }, 'Watchers on this session'),
      h('span', { class: 'hint' }, 'their cursors on it')),
    watchersBody);
  const targetsPanel = h('section', { class: 'panel', 'aria-labelledby': 't-h' },
    h('div', { class: 'panel-head' }, h('h2', { id: 't-h' }, 'Sessions it watches'),
      h('span', { class: 'hint' }, 'its cursors on them')),
    targetsBody);
  const upstream = upstreamPanel({ agentId, sessionKey: key });

  fill(root,
    h('div', { class: 'crumbs' }, h('a', { href: '#/sessions' }, 'Sessions'), ' / ', h('span', { class: 'mono' }, agentId)),
    h('div', { class: 'page-head' }, h('div', null, title, sub), headBadges),
    h('section', { class: 'panel', 'aria-label': 'Summary', style: 'margin-bottom:1rem' }, facts),
    h('div', { class: 'grid' },
      h('div', { class: 'stack' }, timelinePanel),
      h('div', { class: 'stack' },
        qualified ? noticesPanel : null,
        watchersPanel, targetsPanel, watchForm(), upstream.el)));

  // --- Summary ---------------------------------------------------------------
  let version = 0;
  const renderFacts = (st) => {
    version = Math.max(version, st.stateVersion);
    const s = st.session;
    const items = [['State version', version], ['Agent', st.agentId]];
    if (!s && st.listed) {
      items.push(['Kind', st.listed.kind], ['Compactions', st.listed.compactionCount], ['Updated', timeEl(st.listed.updatedAt)]);
    }
    if (s) {
      items.push(['Kind', s.kind]);
      if (s.displayName) items.push(['Name', s.displayName]);
      if (s.provider) items.push(['Provider', s.provider]);
      if (s.chatType) items.push(['Chat type', s.chatType]);
      if (s.parentSessionKey) items.push(['Parent', sessionLink(s.parentSessionKey, agentOf(s.parentSessionKey))]);
      if (s.totalTokens != null) items.push(['Tokens', s.totalTokens.toLocaleString()]);
      if (s.contextTokens != null) items.push(['Context', s.contextTokens.toLocaleString()]);
      items.push(['Compactions', s.compactionCount]);
      items.push(['Updated', timeEl(s.updatedAt)]);
    }
    fill(facts, items.map(([k, v]) => h('div', null, h('dt', null, k), h('dd', { dataset: k === 'State version' ? { version: '' } : null }, v))));
    fill(sub, `agent ${st.agentId} · state version ${version}`);
    fill(headBadges,
      s || st.listed ? h('span', { class: 'badge accent' }, (s || st.listed).kind) : null,
      qualified ? null : h('span', { class: 'badge', title: 'Bare keys get the log and changesSince but can never be watchers (KEY-3)' }, 'bare key'));
  };

  // --- Timeline ----------------------------------------------------------------
  const events = new Map(); // sequence → event
  let from = 0; // events after `from` are loaded
  let top = 0; // highest loaded sequence
  let gap = null; // {earliest} when the log before `earliest` was pruned
  let stopped = false;
  let loaded = false; // the first read is done: live events may be applied
  let missed = false; // live events arrived before that

  const renderTimeline = (freshSeqs = new Set()) => {
    const seqs = [...events.keys()].sort((a, b) => b - a);
    const items = seqs.map((s) => {
      const li = eventItem(events.get(s));
      if (freshSeqs.has(s)) li.classList.add('fresh');
      return li;
    });
    if (sinceParam != null) {
      const idx = seqs.findIndex((s) => s <= sinceParam);
      const mark = h('li', { class: 'since-mark' }, `▲ changes since L = ${sinceParam} (what a reconciling agent reads)`);
      if (idx === -1) items.push(mark); else items.splice(idx, 0, mark);
    }
    if (gap) {
      items.push(h('li', { class: 'gap-mark', dataset: { historyGap: '' } },
        `History gap: events up to #${gap.earliest - 1} were pruned by retention.`));
    }
    if (!items.length) items.push(h('li', { class: 'since-mark' }, version ? 'No events in this range.' : 'No events logged yet.'));
    fill(timeline, items);
    older.hidden = gap != null || from <= 0 || sinceParam != null;
    fill(banner, gap ? h('div', { class: 'banner bad', role: 'alert' },
      h('strong', null, 'History gap. '),
      `The log before #${gap.earliest} was pruned, so a delta from an older cursor is incomplete: a reconciler must refresh the whole session state instead of applying it (REC-2).`) : null);
  };

  const addEvents = (list) => {
    const fresh = new Set();
    for (const ev of list) {
      if (!events.has(ev.sequence)) fresh.add(ev.sequence);
      events.set(ev.sequence, ev);
      if (ev.sequence > top) top = ev.sequence;
    }
    return fresh;
  };

  const readChanges = async (since, limit) => {
    const d = await gql(`query Changes($key: String!, $agentId: String, $since: Int, $limit: Int) {
      sessionStatus(sessionKey: $key, agentId: $agentId, changesSince: $since, limit: $limit) {
        stateVersion stateChanges { events { ${EVENT_FIELDS} } historyGap truncated earliestAvailableSequence nextChangesSince } } }`,
    { key, agentId, since, limit });
    return d.sessionStatus;
  };

  const noteGap = (ch) => {
    if (ch.historyGap) gap = { earliest: ch.earliestAvailableSequence };
  };

  // catchUp reads every event after `top` (after a reconnection or a skipped sequence).
  let catching = null;
  const catchUp = async () => {
    if (catching) return catching;
    catching = (async () => {
      try {
        for (let i = 0; i < 10 && !stopped; i++) {
          const st = await readChanges(top, 200);
          const ch = st.stateChanges;
          noteGap(ch);
          const fresh = addEvents(ch.events);
          if (st.stateVersion > version) version = st.stateVersion;
          updateVersion();
          if (fresh.size) renderTimeline(fresh);
          if (!ch.truncated) break;
        }
      } catch (err) {
        if (!stopped) toast(`Could not read new events: ${errorText(err)}`, 'bad');
      } finally {
        catching = null;
      }
    })();
    return catching;
  };

  const updateVersion = () => {
    const dd = facts.querySelector('dd[data-version]');
    if (dd) dd.textContent = String(version);
    fill(sub, `agent ${agentId} · state version ${version}`);
  };

  const init = async () => {
    let st;
    try {
      const d = await gql(`query Session($key: String!, $agentId: String) {
        sessionStatus(sessionKey: $key, agentId: $agentId) {
          sessionKey agentId stateVersion
          session { sessionKey agentId kind sessionId parentSessionKey chatType provider displayName updatedAt
            stateVersion totalTokens contextTokens compactionCount } } }`, { key, agentId });
      st = d.sessionStatus;
    } catch (err) {
      fill(banner, h('div', { class: 'banner bad', role: 'alert' }, `Could not load this session: ${errorText(err)}`));
      return;
    }
    renderFacts(st);
    if (!st.session) {
      // Not in the registry: the sessions list still knows its kind and last update.
      try {
        const l = await gql(`query One($filter: SessionFilter) { sessionsList(filter: $filter, first: 1) {
          sessions { sessionKey agentId kind updatedAt stateVersion compactionCount } } }`,
        { filter: { agentId, keyPrefix: key } });
        const row = l.sessionsList.sessions.find((s) => s.sessionKey === key);
        if (row) renderFacts({ ...st, listed: row });
      } catch { /* the summary stays short */ }
    }
    from = sinceParam != null ? sinceParam : Math.max(0, st.stateVersion - PAGE);
    top = from;
    try {
      const r = await readChanges(from, 200);
      noteGap(r.stateChanges);
      addEvents(r.stateChanges.events);
      version = Math.max(version, r.stateVersion);
      loaded = true;
      renderTimeline();
      if (r.stateChanges.truncated || missed) await catchUp();
    } catch (err) {
      fill(banner, h('div', { class: 'banner bad', role: 'alert' },
        err.code === 'CURSOR_AHEAD' ? `changesSince ${from} is ahead of this session’s state version ${st.stateVersion} (CURSOR_AHEAD).` : `Could not load events: ${errorText(err)}`));
      fill(timeline);
    }
  };

  older.addEventListener('click', async () => {
    const lo = Math.max(0, from - PAGE);
    older.disabled = true;
    try {
      const r = await readChanges(lo, from - lo);
      noteGap(r.stateChanges);
      addEvents(r.stateChanges.events.filter((e) => e.sequence <= from));
      from = lo;
      renderTimeline();
    } catch (err) {
      toast(`Could not load older events: ${errorText(err)}`, 'bad');
    } finally {
      older.disabled = false;
    }
  });

  // Live: this session's events. A skipped sequence or a reconnection reads the delta.
  const refreshSide = throttle(() => { loadCursors(); }, 700);
  const unsub = live.subscribe(
    `subscription Events($key: String, $agentId: String) { stateEvents(sessionKey: $key, agentId: $agentId) { ${EVENT_FIELDS} } }`,
    { key, agentId },
    {
      next: (d) => {
        const ev = d.stateEvents;
        refreshSide();
        if (!loaded) { missed = true; return; }
        if (events.has(ev.sequence) || ev.sequence <= from) return;
        if (ev.sequence > top + 1) { catchUp(); } else {
          const fresh = addEvents([ev]);
          version = Math.max(version, ev.sequence);
          updateVersion();
          renderTimeline(fresh);
        }
      },
      error: (errs) => toast(`Live events for this session failed: ${errorText(errs)}`, 'bad'),
    });
  cleanups.push(unsub);
  cleanups.push(live.onReconnect(() => { if (loaded) catchUp(); refreshSide(); }));

  // --- Notices of this session (as a watcher) ----------------------------------------
  const renderNotices = () => {
    if (!qualified) return;
    const list = notices.forWatcher(key);
    ackAll.hidden = list.length < 2;
    fill(noticeList, list.length ? list.map((n) => noticeCard(n, notices))
      : h('p', { class: 'empty' }, 'No pending notice: this session is up to date with what it watches.'));
  };
  const onNotices = () => { renderNotices(); refreshSide(); };
  notices.addEventListener('change', onNotices);
  cleanups.push(() => notices.removeEventListener('change', onNotices));
  ackAll.addEventListener('click', async () => {
    ackAll.disabled = true;
    try {
      const follow = await notices.ackAll(key);
      toast(follow.length ? `Acknowledged; ${follow.length} follow-up notice(s) opened.` : 'Acknowledged every pending notice.');
    } catch (err) {
      toast(`Acknowledge failed: ${errorText(err)}`, 'bad');
    } finally {
      ackAll.disabled = false;
    }
  });

  // --- Cursors ----------------------------------------------------------------------
  async function loadCursors() {
    try {
      const d = await gql(`query Cursors($key: String!) { watches(target: $key) { ${CURSOR_FIELDS} } }`, { key });
      const rows = d.watches.filter((c) => c.targetAgentId === agentId);
      fill(watchersBody, rows.length ? cursorTable(rows, 'watcher') : h('p', { class: 'empty' }, 'Nobody watches this session.'));
    } catch (err) {
      fill(watchersBody, h('p', { class: 'empty' }, `Could not load watchers: ${errorText(err)}`));
    }
    if (!qualified) {
      fill(targetsBody, h('p', { class: 'empty' }, 'A bare key (global, cron:…, hook:…) can never be a watcher (KEY-3).'));
      return;
    }
    try {
      const d = await gql(`query Targets($key: String!) { watches(watcher: $key) { ${CURSOR_FIELDS} } }`, { key });
      fill(targetsBody, d.watches.length ? cursorTable(d.watches, 'target') : h('p', { class: 'empty' }, 'This session watches nothing.'));
    } catch (err) {
      fill(targetsBody, h('p', { class: 'empty' }, `Could not load watched sessions: ${errorText(err)}`));
    }
  }

  function cursorTable(rows, who) {
    return h('div', { class: 'table-wrap' }, h('table', { class: 'stacked', dataset: { cursors: who } },
      h('thead', null, h('tr', null,
        h('th', { scope: 'col' }, who === 'watcher' ? 'Watcher' : 'Target'),
        h('th', { scope: 'col', class: 'num', title: 'last acknowledged' }, 'L'),
        h('th', { scope: 'col', class: 'num', title: 'notified (frozen)' }, 'N'),
        h('th', { scope: 'col', class: 'num', title: 'material' }, 'M'),
        h('th', { scope: 'col' }, 'State'),
        h('th', { scope: 'col' }, h('span', { class: 'visually-hidden' }, 'Actions')))),
      h('tbody', null, rows.map((c) => {
        const other = who === 'watcher' ? sessionLink(c.watcher, agentOf(c.watcher)) : sessionLink(c.target, c.targetAgentId);
        const un = h('button', { type: 'button', class: 'link danger', 'aria-label': `Unwatch: ${c.watcher} stops watching ${c.target}` }, 'Unwatch');
        un.addEventListener('click', () => doUnwatch(c.watcher, c.target, c.targetAgentId));
        return h('tr', { dataset: { watcher: c.watcher, target: c.target } },
          h('td', null, other, h('div', { class: 'small muted' }, 'touched ', timeEl(c.updatedAt))),
          h('td', { class: 'num', 'data-label': 'L' }, c.lastAcked),
          h('td', { class: 'num', 'data-label': 'N' }, c.notified),
          h('td', { class: 'num', 'data-label': 'M' }, c.material),
          h('td', null, c.pending ? h('span', { class: 'badge wake' }, 'notice pending')
            : c.material > c.lastAcked ? h('span', { class: 'badge info' }, 'changed') : h('span', { class: 'badge ok' }, 'in sync')),
          h('td', null, un));
      }))));
  }

  // --- Watch / unwatch form ---------------------------------------------------------
  async function doUnwatch(watcher, target, targetAgentId) {
    try {
      const d = await gql(`mutation Unwatch($watcher: String!, $target: String!, $targetAgentId: String) {
        unwatch(watcher: $watcher, target: $target, targetAgentId: $targetAgentId) }`, { watcher, target, targetAgentId });
      result.className = `form-result ${d.unwatch ? 'ok' : ''}`;
      fill(result, d.unwatch ? `${watcher} no longer watches ${target}.` : `${watcher} was not watching ${target}.`);
    } catch (err) {
      result.className = 'form-result bad';
      fill(result, `Unwatch failed: ${errorText(err)}`);
    }
    loadCursors();
    notices.reconcileSoon();
  }

  function watchForm() {
    const watcher = h('input', { type: 'text', id: 'watch-watcher', name: 'watcher', required: true, autocomplete: 'off', spellcheck: 'false',
      placeholder: 'agent:main:main', value: qualified ? '' : 'agent:main:main' });
    const target = h('input', { type: 'text', id: 'watch-target', name: 'target', required: true, autocomplete: 'off', spellcheck: 'false', value: key });
    const watchBtn = h('button', { type: 'submit', class: 'primary' }, 'Watch');
    const unwatchBtn = h('button', { type: 'button' }, 'Unwatch');
    const form = h('form', { class: 'form', id: 'watch-form', 'aria-labelledby': 'wf-h' },
      h('div', { class: 'field' }, h('label', { for: 'watch-watcher' }, 'Watcher'), watcher),
      h('div', { class: 'field' }, h('label', { for: 'watch-target' }, 'Target'), target),
      h('div', { class: 'form-actions' }, watchBtn, unwatchBtn));
    const targetAgent = () => (target.value.trim().toLowerCase() === key ? agentId : null);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      watchBtn.disabled = true;
      try {
        const d = await gql(`mutation Watch($input: WatchInput!) { watch(input: $input) { watched reason cursor { ${CURSOR_FIELDS} } } }`,
          { input: { watcher: watcher.value.trim(), target: target.value.trim(), targetAgentId: targetAgent() } });
        const w = d.watch;
        result.className = `form-result ${w.watched ? 'ok' : 'bad'}`;
        fill(result, w.watched
          ? `${w.cursor.watcher} watches ${w.cursor.target} from version ${w.cursor.lastAcked}; earlier history never notifies.`
          : `Not watched: ${w.reason}`);
      } catch (err) {
        result.className = 'form-result bad';
        fill(result, `Watch failed: ${errorText(err)}`);
      } finally {
        watchBtn.disabled = false;
      }
      loadCursors();
    });
    unwatchBtn.addEventListener('click', () => {
      if (!form.reportValidity()) return;
      doUnwatch(watcher.value.trim(), target.value.trim(), targetAgent());
    });
    return h('section', { class: 'panel', 'aria-labelledby': 'wf-h' },
      h('div', { class: 'panel-head' }, h('h2', { id: 'wf-h' }, 'Watch or unwatch'),
        h('span', { class: 'hint' }, 'what a gateway does after sessions_send watch:true')),
      form, result);
  }

  init();
  renderNotices();
  loadCursors();
  return () => { stopped = true; cleanups.forEach((fn) => fn()); };
}
