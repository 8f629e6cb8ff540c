// One session (#/session/<agentId>/<sessionKey>[?since=L&watcher=W]): its live event
// timeline (sessionStatus + stateEvents, filterable by kind and actor), the history
// gap when the log was pruned (REC-2), the notices ABOUT it (who waits to reconcile
// it, with Acknowledge: a notice's Reconcile link lands here, on that notice), the
// notices it holds as a watcher, the watchers on it and the targets it watches with
// their cursors, its activity chart, a watch/unwatch form, and its upstream link.
//
// Every panel is a live panel (panels.js): dimmed with the time of its last update
// while the connection is down, reloaded by itself when it is back.
//
// The page checks that what it shows is still the server's (audit): every few
// seconds, at a reconnection and on a live event it already has. A state version below
// the one shown (CURSOR_AHEAD: a restart on other data, a deleted incarnation), an
// event at a shown sequence that differs, or shown events the log no longer has
// (deleted, or pruned: historyGap) refresh the whole view, saying why.

import { h, fill, eventItem, sessionLink, sessionHref, watcherHref, timeEl, throttle, toast, isQualified, agentOf, keyText } from '../dom.js';
import { gql, errorText, EVENT_FIELDS, CURSOR_FIELDS } from '../gql.js';
import { noticeList, noNotices, noticePanel, ackToast, upstreamPanel, activityChart, eventFilter, forbiddenPage } from './components.js';

const PAGE = 50;
const AUDIT_EVERY_MS = 5000;

export function sessionView(root, { agentId, key, query, notices, bus, live, panels, auth, viewer, refresh }) {
  const cleanups = [];
  if (!viewer.mayRead(agentId)) {
    fill(root, forbiddenPage(viewer, `the session ${key} of agent ${agentId}`,
      h('div', { class: 'crumbs' }, h('a', { href: '#/sessions' }, 'Sessions'), ' / ', h('span', { class: 'mono' }, agentId)), keyText(key)));
    return () => {};
  }
  const qualified = isQualified(key);
  const sinceParam = query.has('since') && /^\d+$/.test(query.get('since')) ? Number(query.get('since')) : null;
  const forWatcher = query.get('watcher') || '';

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
  const evFilter = eventFilter(() => renderTimeline(), 'tf');
  const timelineHead = h('div', { class: 'panel-head' },
    h('h2', { id: 'timeline-h' }, 'Timeline'),
    sinceForm);
  const timelinePanel = h('section', { class: 'panel', id: 'timeline-panel', 'aria-labelledby': 'timeline-h' },
    timelineHead, evFilter.el, banner, timeline, h('div', { style: 'margin-top:.75rem' }, older));

  // Notices about this session (who waits to reconcile it) and the ones it holds.
  const result = h('p', { class: 'form-result', role: 'status', id: 'watch-result' });
  const aboutList = h('div', { class: 'notices', id: 'about-notices', 'aria-live': 'polite' });
  const ackAbout = h('button', { type: 'button', hidden: true, id: 'ack-about' }, 'Acknowledge all');
  const aboutHead = h('div', { class: 'panel-head' },
    h('h2', { id: 'an-h', tabindex: '-1' }, 'Notices about this session'),
    h('span', { class: 'hint' }, 'watchers waiting to reconcile it'),
    h('a', { class: 'small', href: `#/acks?target=${encodeURIComponent(key)}` }, 'history'), ackAbout);
  const aboutPanel = h('section', { class: 'panel', id: 'about-panel', 'aria-labelledby': 'an-h' }, aboutHead, aboutList);
  const heldList = h('div', { class: 'notices', id: 'session-notices', 'aria-live': 'polite' });
  const ackHeld = h('button', { type: 'button', hidden: true, id: 'ack-held' }, 'Acknowledge all');
  const heldHead = h('div', { class: 'panel-head' },
    h('h2', { id: 'sn-h', tabindex: '-1' }, 'Notices it holds as a watcher'),
    h('a', { class: 'small', href: watcherHref(key) }, 'watcher view'), ackHeld);
  const heldPanel = h('section', { class: 'panel', id: 'held-panel', 'aria-labelledby': 'sn-h' }, heldHead, heldList);
  const watchersBody = h('div', null, h('p', { class: 'skeleton' }, 'Loading…'));
  const targetsBody = h('div', null, h('p', { class: 'skeleton' }, 'Loading…'));
  const watchersHead = h('div', { class: 'panel-head' }, h('h2', { id: 'w-h' }, 'Watchers on this session'),
    h('span', { class: 'hint' }, 'their cursors on it'));
  const watchersPanel = h('section', { class: 'panel', id: 'watchers-panel', 'aria-labelledby': 'w-h' }, watchersHead, watchersBody);
  const targetsHead = h('div', { class: 'panel-head' }, h('h2', { id: 't-h' }, 'Sessions it watches'),
    h('span', { class: 'hint' }, 'its cursors on them'));
  const targetsPanel = h('section', { class: 'panel', id: 'targets-panel', 'aria-labelledby': 't-h' }, targetsHead, targetsBody);
  const chart = activityChart({ sessionKey: key, agentId, panels, bus, notices, cleanups });
  const upstream = upstreamPanel({ agentId, sessionKey: key, panels, bus, auth, cleanups });
  const summary = h('section', { class: 'panel', 'aria-label': 'Summary', style: 'margin-bottom:1rem', hidden: true }, facts);

  fill(root,
    h('div', { class: 'crumbs' }, h('a', { href: '#/sessions' }, 'Sessions'), ' / ', h('span', { class: 'mono' }, agentId)),
    h('div', { class: 'page-head' }, h('div', null, title, sub), headBadges),
    summary,
    h('div', { class: 'grid' },
      h('div', { class: 'stack' }, aboutPanel, timelinePanel),
      h('div', { class: 'stack' },
        qualified ? heldPanel : null,
        chart, watchersPanel, targetsPanel, watchForm(), upstream.el)));

  // --- Summary ---------------------------------------------------------------
  let version = 0;
  let status = null;
  let children = [];
  let spawnedBy = null;
  const renderFacts = () => {
    const st = status;
    if (!st) return;
    version = Math.max(version, st.stateVersion);
    const s = st.session;
    const items = [['State version', version], ['Agent', st.agentId]];
    // LIF-2: shown once the session was reset (a new incarnation of the same key).
    if (st.generation > 1) items.push(['Generation', st.generation]);
    if (!s && st.listed) {
      items.push(['Kind', st.listed.kind], ['Compactions', st.listed.compactionCount], ['Updated', timeEl(st.listed.updatedAt)]);
    }
    const parent = (s && s.parentSessionKey) || spawnedBy;
    if (parent) items.push(['Parent', sessionLink(parent, agentOf(parent))]);
    if (children.length) items.push(['Children', h('span', { class: 'links' }, children.map((c) => sessionLink(c.target, c.targetAgentId)))]);
    if (s) {
      items.push(['Kind', s.kind]);
      if (s.displayName) items.push(['Name', s.displayName]);
      if (s.provider) items.push(['Provider', s.provider]);
      if (s.chatType) items.push(['Chat type', s.chatType]);
      if (s.totalTokens != null) items.push(['Tokens', s.totalTokens.toLocaleString()]);
      if (s.contextTokens != null) items.push(['Context', s.contextTokens.toLocaleString()]);
      items.push(['Compactions', s.compactionCount]);
      items.push(['Updated', timeEl(s.updatedAt)]);
    }
    summary.hidden = false;
    fill(facts, items.map(([k, v]) => h('div', { dataset: { fact: k.toLowerCase() } }, h('dt', null, k), h('dd', { dataset: k === 'State version' ? { version: '' } : null }, v))));
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

  function renderTimeline(freshSeqs = new Set()) {
    const seqs = [...events.keys()].sort((a, b) => b - a);
    evFilter.learn([...events.values()]);
    const items = seqs.filter((s) => evFilter.match(events.get(s))).map((s) => {
      const li = eventItem(events.get(s), null, (a) => evFilter.setActor(a));
      if (freshSeqs.has(s)) li.classList.add('fresh');
      return li;
    });
    if (sinceParam != null) {
      const idx = seqs.filter((s) => evFilter.match(events.get(s))).findIndex((s) => s <= sinceParam);
      const mark = h('li', { class: 'since-mark' }, `▲ changes since L = ${sinceParam} (what a reconciling agent reads)`);
      if (idx === -1) items.push(mark); else items.splice(idx, 0, mark);
    }
    if (gap) {
      items.push(h('li', { class: 'gap-mark', dataset: { historyGap: '' } },
        `History gap: events up to #${gap.earliest - 1} were pruned (by retention, or deleted with the session).`));
    }
    if (!events.size) {
      items.push(h('li', { class: 'since-mark', dataset: { emptyTimeline: '' } }, version ? 'No events in this range.'
        : 'No events logged yet. Events recorded for this key (recordEvent with this sessionKey) appear here live.'));
    } else if (evFilter.active() && !seqs.some((s) => evFilter.match(events.get(s)))) {
      items.push(h('li', { class: 'since-mark' }, 'No loaded event matches the filter.'));
    }
    fill(timeline, items);
    older.hidden = gap != null || from <= 0 || sinceParam != null;
    fill(banner, gap ? h('div', { class: 'banner bad', role: 'alert' },
      h('strong', null, 'History gap. '),
      `The log before #${gap.earliest} is gone, so a delta from an older cursor is incomplete: a reconciler must refresh the whole session state instead of applying it (REC-2).`) : null);
    // The child_spawned event names the parent.
    const spawn = [...events.values()].find((e) => e.kind === 'child_spawned' && e.actorId && isQualified(e.actorId));
    if (spawn && spawnedBy !== spawn.actorId) { spawnedBy = spawn.actorId; renderFacts(); }
  }

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

  const updateVersion = () => {
    const dd = facts.querySelector('dd[data-version]');
    if (dd) dd.textContent = String(version);
    fill(sub, `agent ${agentId} · state version ${version}`);
  };

  // catchUp reads every event after `top` (after a reconnection or a skipped sequence).
  // It throws when the server cannot answer: the panel is then stale and retried.
  let catching = null;
  const catchUp = () => {
    if (catching) return catching;
    catching = (async () => {
      try {
        for (let i = 0; i < 10 && !stopped; i++) {
          let st;
          try {
            st = await readChanges(top, 200);
          } catch (err) {
            if (err.code === 'CURSOR_AHEAD') { again(`This session’s state version on the server is below the ${top} shown (another database, or a deleted incarnation).`); return; }
            throw err;
          }
          const ch = st.stateChanges;
          if (ch.historyGap) { again('Events after the newest one shown were pruned before this page read them.'); return; }
          noteGap(ch);
          const fresh = addEvents(ch.events);
          if (st.stateVersion > version) version = st.stateVersion;
          updateVersion();
          if (fresh.size) renderTimeline(fresh);
          if (!ch.truncated) break;
        }
      } finally {
        catching = null;
      }
    })();
    return catching;
  };

  // again refreshes the whole view once: what it shows is no longer the server's.
  let refreshing = false;
  const again = (why) => {
    if (refreshing || stopped) return;
    refreshing = true;
    refresh(`${why} The page shows the session as the server has it now.`);
  };
  const sameEvent = (a, b) => a.kind === b.kind && a.occurredAt === b.occurredAt && a.summary === b.summary && (a.actorId || '') === (b.actorId || '');

  // audit checks that the events shown are still the server's (see the file's doc).
  // It throws when the server cannot answer.
  let auditing = null;
  const audit = () => {
    if (auditing) return auditing;
    if (!loaded || stopped) return Promise.resolve();
    auditing = (async () => {
      try {
        const at = top;
        let st;
        try {
          st = await readChanges(Math.max(0, at - 1), 1);
        } catch (err) {
          if (err.code === 'CURSOR_AHEAD') { again(`This session’s state version on the server is below the ${at} shown (another database, or a deleted incarnation).`); return; }
          throw err;
        }
        if (stopped || at !== top) return;
        const ch = st.stateChanges;
        const lowest = events.size ? Math.min(...events.keys()) : 0;
        if (lowest && ch.earliestAvailableSequence > lowest) { again(`The events shown from #${lowest} are no longer on the server (deleted with the session, or pruned).`); return; }
        const mine = events.get(at);
        const theirs = ch.events.find((e) => e.sequence === at);
        if (mine && (!theirs || !sameEvent(mine, theirs))) { again(`The server’s event #${at} is not the one shown (another database after a restart).`); return; }
        if (st.stateVersion > top) await catchUp();
      } finally {
        auditing = null;
      }
    })();
    return auditing;
  };
  const auditTimer = setInterval(() => {
    if (live.state.status === 'connected' && document.visibilityState === 'visible') audit().catch(() => timelineP.run());
  }, AUDIT_EVERY_MS);
  cleanups.push(() => clearInterval(auditTimer));

  // loadTimeline is the timeline panel's load: the whole first read, or, once that
  // succeeded, the audit and the delta since the newest loaded event.
  const loadTimeline = async () => {
    if (loaded) {
      await audit();
      if (!refreshing) await catchUp();
      return;
    }
    let st;
    try {
      const d = await gql(`query Session($key: String!, $agentId: String) {
        sessionStatus(sessionKey: $key, agentId: $agentId) {
          sessionKey agentId stateVersion generation
          session { sessionKey agentId kind sessionId parentSessionKey chatType provider displayName updatedAt
            stateVersion totalTokens contextTokens compactionCount } } }`, { key, agentId });
      st = d.sessionStatus;
    } catch (err) {
      if (!events.size) fill(timeline);
      throw err;
    }
    status = st;
    renderFacts();
    if (!st.session) {
      // Not in the registry: the sessions list still knows its kind and last update.
      try {
        const l = await gql(`query One($filter: SessionFilter) { sessionsList(filter: $filter, first: 1) {
          sessions { sessionKey agentId kind updatedAt stateVersion compactionCount } } }`,
        { filter: { agentId, keyPrefix: key } });
        const row = l.sessionsList.sessions.find((s) => s.sessionKey === key);
        if (row) { status = { ...st, listed: row }; renderFacts(); }
      } catch { /* the summary stays short */ }
    }
    from = sinceParam != null ? sinceParam : Math.max(0, st.stateVersion - PAGE);
    top = from;
    let r;
    try {
      r = await readChanges(from, 200);
    } catch (err) {
      if (err.code === 'CURSOR_AHEAD') {
        fill(banner, h('div', { class: 'banner bad', role: 'alert' },
          `changesSince ${from} is ahead of this session’s state version ${st.stateVersion} (CURSOR_AHEAD).`));
        fill(timeline);
        return; // an answer, not a failure: retrying would not change it
      }
      throw err;
    }
    fill(banner);
    noteGap(r.stateChanges);
    addEvents(r.stateChanges.events);
    if (!events.has(1) && !(st.session && st.session.parentSessionKey)) {
      // The first event names the parent (child_spawned by it): read it for the summary.
      try {
        const first = await readChanges(0, 1);
        const ev = first.stateChanges.events[0];
        if (ev && ev.kind === 'child_spawned' && ev.actorId && isQualified(ev.actorId)) { spawnedBy = ev.actorId; renderFacts(); }
      } catch { /* the summary stays without it */ }
    }
    version = Math.max(version, r.stateVersion);
    loaded = true;
    renderTimeline();
    if (r.stateChanges.truncated || missed) await catchUp();
  };
  const timelineP = panels.add(timelinePanel, timelineHead, loadTimeline, 'this session’s events', [summary]);
  cleanups.push(() => timelineP.remove());

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

  // Live: this session's events. A skipped sequence reads the delta.
  const refreshSide = throttle(() => { cursorsP.run(); }, 700);
  cleanups.push(() => refreshSide.cancel());
  const unsub = live.subscribe(
    `subscription Events($key: String, $agentId: String) { stateEvents(sessionKey: $key, agentId: $agentId) { ${EVENT_FIELDS} } }`,
    { key, agentId },
    {
      next: (d) => {
        const ev = d.stateEvents;
        refreshSide();
        if (!loaded) { missed = true; return; }
        if (events.has(ev.sequence) && !sameEvent(events.get(ev.sequence), ev)) { timelineP.run(); return; }
        if (events.has(ev.sequence) || ev.sequence <= from) return;
        if (ev.sequence > top + 1) { timelineP.run(); } else {
          const fresh = addEvents([ev]);
          version = Math.max(version, ev.sequence);
          updateVersion();
          renderTimeline(fresh);
        }
      },
      error: (errs) => toast(`Live events for this session failed: ${errorText(errs)}`, 'bad'),
    });
  cleanups.push(unsub);

  // --- Notices about it and held by it --------------------------------------------
  const about = () => notices.aboutTarget(agentId, key);
  const held = () => (qualified ? notices.forWatcher(key) : []);
  const paintAbout = noticeList(aboutList, notices, about, () => noNotices(notices, auth,
    'Nobody waits to reconcile this session: no watcher has a pending notice about it.'));
  const paintHeld = noticeList(heldList, notices, held, () => noNotices(notices, auth,
    'No pending notice: this session is up to date with what it watches.'));
  let landed = false;
  const renderNotices = () => {
    const a = paintAbout();
    ackAbout.hidden = a.length < 2;
    if (qualified) ackHeld.hidden = paintHeld().length < 2;
    // Reconcile's link names the watcher: land on its notice, where Acknowledge is.
    if (forWatcher && !landed) {
      const card = aboutList.querySelector(`.notice[data-watcher="${CSS.escape(forWatcher)}"]`);
      if (card) {
        landed = true;
        card.classList.add('landed');
        // After the router focused the heading: the keyboard lands on Acknowledge too.
        requestAnimationFrame(() => {
          card.scrollIntoView({ block: 'center' });
          const ack = card.querySelector('button.ack');
          if (ack && document.contains(ack)) ack.focus({ preventScroll: true });
        });
      }
    }
  };
  const onNotices = () => { renderNotices(); refreshSide(); };
  notices.addEventListener('change', onNotices);
  auth.addEventListener('change', renderNotices);
  cleanups.push(() => { notices.removeEventListener('change', onNotices); auth.removeEventListener('change', renderNotices); });
  const bulk = (btn, list) => btn.addEventListener('click', async () => {
    btn.setAttribute('aria-disabled', 'true');
    try {
      const ns = list();
      const byWatcher = new Map();
      for (const n of ns) byWatcher.set(n.watcher, [...(byWatcher.get(n.watcher) || []), n]);
      const res = { follow: [], acks: [], queued: false };
      for (const [w, group] of byWatcher) {
        const r = await notices.ack(w, group);
        res.follow.push(...r.follow);
        res.acks.push(...r.acks);
        res.queued = res.queued || r.queued;
      }
      ackToast(res, ns);
    } catch (err) {
      toast(`Acknowledge failed: ${errorText(err)}`, 'bad');
    } finally {
      btn.removeAttribute('aria-disabled');
    }
  });
  bulk(ackAbout, about);
  bulk(ackHeld, held);
  noticePanel(panels, notices, aboutPanel, aboutHead, 'the notices about this session', cleanups);
  if (qualified) noticePanel(panels, notices, heldPanel, heldHead, 'the notices it holds', cleanups);

  // --- Cursors ----------------------------------------------------------------------
  async function loadCursors() {
    const d = await gql(`query Cursors($key: String!) { watches(target: $key) { ${CURSOR_FIELDS} } }`, { key });
    const rows = d.watches.filter((c) => c.targetAgentId === agentId);
    fill(watchersBody, rows.length ? cursorTable(rows, 'watcher') : h('p', { class: 'empty' },
      'Nobody watches this session. A gateway registers a watcher with watch (sessions_send watch:true), or use the form below.'));
  }
  async function loadTargets() {
    if (!qualified) {
      fill(targetsBody, h('p', { class: 'empty' }, 'A bare key (global, cron:…, hook:…) can never be a watcher (KEY-3).'));
      return;
    }
    const d = await gql(`query Targets($key: String!) { watches(watcher: $key) { ${CURSOR_FIELDS} } }`, { key });
    fill(targetsBody, d.watches.length ? cursorTable(d.watches, 'target') : h('p', { class: 'empty' }, 'This session watches nothing.'));
    const kids = d.watches.filter((c) => c.target.startsWith(`agent:${agentId}:subagent:`));
    if (kids.map((c) => c.target).join() !== children.map((c) => c.target).join()) { children = kids; renderFacts(); }
  }
  const watchersP = panels.add(watchersPanel, watchersHead, loadCursors, 'the watchers');
  const targetsP = panels.add(targetsPanel, targetsHead, loadTargets, 'the watched sessions');
  const cursorsP = { run: () => { watchersP.run(); targetsP.run(); } };
  cleanups.push(() => { watchersP.remove(); targetsP.remove(); });

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
          h('td', null, c.pending ? h('a', { class: 'badge wake', href: who === 'watcher' ? '#' : watcherHref(c.watcher), dataset: { pendingLink: '' },
            onclick: who === 'watcher' ? (e) => { e.preventDefault(); const card = aboutList.querySelector(`.notice[data-watcher="${CSS.escape(c.watcher)}"] button.ack`); if (card) card.focus(); } : null,
          }, 'notice pending')
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
      fill(result, `Unwatch failed: ${errorText(err)} Nothing was changed.`);
    }
    cursorsP.run();
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
      watchBtn.setAttribute('aria-disabled', 'true');
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
        fill(result, `Watch failed: ${errorText(err)} Nothing was changed.`);
      } finally {
        watchBtn.removeAttribute('aria-disabled');
      }
      cursorsP.run();
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

  renderNotices();
  return () => { stopped = true; cleanups.forEach((fn) => fn()); };
}
