// Entry point of the dashboard: the live connection, the notice store, the viewer
// (who the token is), the connection indicator, the outage banner, the keyboard
// shortcuts and the hash router.
//
// Routes:
//   #/ or #/notices                       pending notices, activity, upstream links
//   #/stale                               who is stale, and for how long
//   #/tree?agent=                         the manager → sub-agent tree
//   #/acks?watcher=&target=&agent=        the acknowledgement history
//   #/sessions?agent=&kinds=&active=&prefix=&first=&after=&sort=&dir=
//   #/session/<agentId>/<sessionKey>[?since=L&watcher=W]
//   #/watcher/<sessionKey>                everything one watcher waits on
//
// The tab title starts with the number of pending notices, "(3) Notices · …".

import { Live, MAX_BACKOFF_MS } from './live.js';
import { NoticeStore } from './notices.js';
import { Auth } from './auth.js';
import { Panels } from './panels.js';
import { Viewer } from './viewer.js';
import { installKeys } from './keys.js';
import { useAuth } from './gql.js';
import { loadKinds } from './vocab.js';
import { fill, h, refreshTimes, toast } from './dom.js';
import { homeView } from './views/home.js';
import { sessionsView } from './views/sessions.js';
import { sessionView } from './views/session.js';
import { watcherView } from './views/watcher.js';
import { staleView } from './views/stale.js';
import { treeView } from './views/tree.js';
import { acksView } from './views/acks.js';

const auth = new Auth();
useAuth(auth);
const live = new Live(auth);
const notices = new NoticeStore(live);
const panels = new Panels(live, auth, document.getElementById('outage'));
const viewer = new Viewer(auth);
// bus announces 'event' (some session logged a change) and 'reconnect' to the views.
const bus = new EventTarget();

const main = document.getElementById('main');
let unmount = null;

function parseRoute() {
  const raw = location.hash.replace(/^#/, '') || '/';
  const [path, qs] = raw.split('?', 2);
  const query = new URLSearchParams(qs || '');
  const parts = path.split('/').filter(Boolean);
  if (parts.length === 0 || parts[0] === 'notices') return { name: 'notices', query };
  if (['sessions', 'stale', 'tree', 'acks'].includes(parts[0]) && parts.length === 1) return { name: parts[0], query };
  if (parts[0] === 'watcher' && parts.length >= 2) {
    try {
      return { name: 'watcher', key: decodeURIComponent(parts.slice(1).join('/')), query };
    } catch {
      return { name: 'notfound', query };
    }
  }
  if (parts[0] === 'session' && parts.length >= 3) {
    try {
      const agentId = decodeURIComponent(parts[1]);
      const key = decodeURIComponent(parts.slice(2).join('/'));
      return { name: 'session', agentId, key, query };
    } catch {
      return { name: 'notfound', query };
    }
  }
  return { name: 'notfound', query };
}

// The tab title: the pending count, then the page.
let baseTitle = 'Notices';
function setTitle() {
  const n = notices.byPair.size;
  const t = `${n ? `(${n}) ` : ''}${baseTitle} · Session state awareness`;
  if (document.title !== t) document.title = t;
}
notices.addEventListener('change', setTitle);

// The nav entry each route belongs to.
const NAV_OF = { notices: 'notices', watcher: 'notices', stale: 'stale', tree: 'tree', acks: 'acks', sessions: 'sessions', session: 'sessions' };

/**
 * render mounts the route's view. refresh (a view's full refresh: its data changed
 * under it on the server) keeps the focus and scroll and shows why at the top.
 */
let renderedRole = null;
function render(refresh, quiet = false) {
  if (!location.hash.startsWith('#/') && location.hash !== '') return; // e.g. the skip link
  const route = parseRoute();
  renderedRole = viewer.agent();
  if (unmount) unmount();
  unmount = null;
  for (const a of document.querySelectorAll('[data-nav]')) {
    if (a.dataset.nav === NAV_OF[route.name]) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  const ctx = {
    live, notices, bus, panels, auth, viewer, query: route.query,
    refresh: (why) => queueMicrotask(() => render(why)),
  };
  const views = {
    notices: ['Notices', () => homeView(main, ctx)],
    stale: ['Who is stale', () => staleView(main, ctx)],
    tree: ['Session tree', () => treeView(main, ctx)],
    acks: ['Acknowledgements', () => acksView(main, ctx)],
    sessions: ['Sessions', () => sessionsView(main, ctx)],
    session: [route.key, () => sessionView(main, { ...ctx, agentId: route.agentId, key: route.key })],
    watcher: [`${route.key} waits on`, () => watcherView(main, { ...ctx, key: route.key })],
  };
  const v = views[route.name];
  if (v) {
    baseTitle = v[0];
    unmount = v[1]();
  } else {
    baseTitle = 'Not found';
    fill(main, h('div', { class: 'panel' },
      h('h1', { tabindex: '-1' }, 'Page not found'),
      h('p', null, 'Go to ', h('a', { href: '#/' }, 'notices'), ' or ', h('a', { href: '#/sessions' }, 'sessions'), '.')));
  }
  if (refresh) {
    main.prepend(h('div', { class: 'banner info refreshed', role: 'status', dataset: { refreshed: '' } },
      h('strong', null, 'Refreshed. '), refresh));
  }
  setTitle();
  // Move focus to the new page's heading so keyboard and screen-reader users land on it.
  if (render.initialised && !refresh && !quiet) {
    const h1 = main.querySelector('h1');
    if (h1) h1.focus({ preventScroll: true });
    window.scrollTo(0, 0);
  }
  render.initialised = true;
}

// The connection indicator. The countdown to the next attempt is shown to the tenth
// of a second (the wait is at most MAX_BACKOFF_MS); screen readers hear the state only.
const conn = document.getElementById('conn');
const connLabel = conn.querySelector('.conn-label');
const connRetry = conn.querySelector('.conn-retry');
const tokenBtn = document.getElementById('token-btn');
const viewerChip = document.getElementById('viewer-chip');
let countdown = null;
tokenBtn.addEventListener('click', () => auth.open());
const paintToken = () => {
  tokenBtn.hidden = !(live.state.status === 'unauthorised' || auth.state === 'needed' || auth.token() || (viewer.v && viewer.v.authenticated));
  tokenBtn.classList.toggle('hot', auth.state === 'needed');
};
auth.addEventListener('change', paintToken);
viewer.addEventListener('change', () => {
  const label = viewer.label();
  viewerChip.hidden = !label;
  fill(viewerChip, label);
  viewerChip.title = viewer.agent()
    ? `This token reads and acts for the sessions of agent ${viewer.agent()} only`
    : 'This token may read and do everything';
  viewerChip.dataset.role = viewer.v ? viewer.v.role : '';
  paintToken();
  // The views show what the token may read: a new role renders the page again.
  if (render.initialised && viewer.agent() !== renderedRole) render(null, true);
});
notices.addEventListener('flushed', (e) => {
  const { notices: ns, error, follow } = e.detail;
  if (error) toast(`A queued acknowledgement failed: ${error.message}`, 'bad');
  else toast(`Sent the queued acknowledgement of ${ns.length === 1 ? ns[0].target : `${ns.length} notices`}${follow && follow.length ? `; ${follow.length} follow-up notice opened` : ''}.`);
});
connRetry.addEventListener('click', () => live.retryNow());
live.onState((s) => {
  conn.dataset.state = s.status;
  clearInterval(countdown);
  connRetry.hidden = !(s.status === 'waiting' || s.status === 'offline');
  const label = () => {
    switch (s.status) {
      case 'connected': return 'Live';
      case 'connecting': return 'Connecting…';
      case 'reconnecting': return 'Reconnecting…';
      case 'waiting': {
        const left = Math.min(MAX_BACKOFF_MS, Math.max(0, s.retryAt - Date.now()));
        return [h('span', { class: 'visually-hidden' }, 'Disconnected, retrying shortly'),
          h('span', { 'aria-hidden': 'true' }, `Disconnected · retrying in ${(left / 1000).toFixed(1)}s`)];
      }
      case 'offline': return s.detail ? `Offline · ${s.detail}` : 'Offline';
      case 'unauthorised': return 'Not authorised';
      default: return s.status;
    }
  };
  fill(connLabel, label());
  paintToken();
  conn.title = s.status === 'connected' ? 'Live updates over WebSocket (graphql-transport-ws)' : 'Live updates paused; the dashboard reconnects by itself';
  if (s.status === 'waiting') {
    countdown = setInterval(() => {
      const span = connLabel.querySelector('[aria-hidden]');
      const left = Math.min(MAX_BACKOFF_MS, Math.max(0, s.retryAt - Date.now()));
      if (span) span.textContent = `Disconnected · retrying in ${(left / 1000).toFixed(1)}s`;
    }, 100);
  }
});

document.getElementById('skip-link').addEventListener('click', (e) => {
  e.preventDefault();
  main.focus();
});
const keys = installKeys(main);
document.getElementById('keys-btn').addEventListener('click', () => keys.help.showModal());

live.start();
notices.start(auth);
viewer.load();
// Every session's log (an agent-role token: its own agent's sessions): views refresh
// what they show when something changed.
live.subscribe('subscription { stateEvents { sequence kind sessionKey agentId } }', {}, {
  next: (d) => bus.dispatchEvent(new CustomEvent('event', { detail: d.stateEvents })),
  error: () => {},
});
live.onReconnect(() => { bus.dispatchEvent(new Event('reconnect')); viewer.load(); loadKinds().catch(() => {}); });
auth.addEventListener('token', () => { bus.dispatchEvent(new Event('reconnect')); loadKinds().catch(() => {}); });
// M (the material watermark) moves without a new notice: re-read pending notices.
bus.addEventListener('event', () => { if (notices.byPair.size) notices.reconcileSoon(); });
setInterval(() => refreshTimes(document), 10000);

window.addEventListener('hashchange', () => render());
render();
// The event kinds colour the badges; the chart also reads them with its own data.
loadKinds().catch(() => {});
