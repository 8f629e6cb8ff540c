// Entry point of the dashboard: the live connection, the notice store, the connection
// indicator and the hash router.
//
// Routes:
//   #/ or #/notices                       pending notices, activity, upstream links
//   #/sessions?agent=&kinds=&active=&prefix=&first=&after=
//   #/session/<agentId>/<sessionKey>[?since=L&watcher=W]
//   #/watcher/<sessionKey>                everything one watcher waits on
//
// The tab title starts with the number of pending notices, "(3) Notices · …".

import { Live } from './live.js';
import { NoticeStore } from './notices.js';
import { Auth } from './auth.js';
import { Panels } from './panels.js';
import { useAuth } from './gql.js';
import { fill, h, refreshTimes, toast } from './dom.js';
import { homeView } from './views/home.js';
import { sessionsView } from './views/sessions.js';
import { sessionView } from './views/session.js';
import { watcherView } from './views/watcher.js';

const auth = new Auth();
useAuth(auth);
const live = new Live(auth);
const notices = new NoticeStore(live);
const panels = new Panels(live, auth);
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
  if (parts[0] === 'sessions') return { name: 'sessions', query };
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

function render() {
  if (!location.hash.startsWith('#/') && location.hash !== '') return; // e.g. the skip link
  const route = parseRoute();
  if (unmount) unmount();
  unmount = null;
  for (const a of document.querySelectorAll('[data-nav]')) {
    const current = a.dataset.nav === route.name || (a.dataset.nav === 'sessions' && route.name === 'session') || (a.dataset.nav === 'notices' && route.name === 'watcher');
    if (current) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  const ctx = { live, notices, bus, panels, auth, query: route.query };
  switch (route.name) {
    case 'notices':
      baseTitle = 'Notices';
      unmount = homeView(main, ctx);
      break;
    case 'sessions':
      baseTitle = 'Sessions';
      unmount = sessionsView(main, ctx);
      break;
    case 'session':
      baseTitle = route.key;
      unmount = sessionView(main, { ...ctx, agentId: route.agentId, key: route.key });
      break;
    case 'watcher':
      baseTitle = `${route.key} waits on`;
      unmount = watcherView(main, { ...ctx, key: route.key });
      break;
    default:
      baseTitle = 'Not found';
      fill(main, h('div', { class: 'panel' },
        h('h1', { tabindex: '-1' }, 'Page not found'),
        h('p', null, 'Go to ', h('a', { href: '#/' }, 'notices'), ' or ', h('a', { href: '#/sessions' }, 'sessions'), '.')));
  }
  setTitle();
  // Move focus to the new page's heading so keyboard and screen-reader users land on it.
  if (render.initialised) {
    const h1 = main.querySelector('h1');
    if (h1) h1.focus({ preventScroll: true });
    window.scrollTo(0, 0);
  }
  render.initialised = true;
}

// The connection indicator.
const conn = document.getElementById('conn');
const connLabel = conn.querySelector('.conn-label');
const connRetry = conn.querySelector('.conn-retry');
const tokenBtn = document.getElementById('token-btn');
let countdown = null;
tokenBtn.addEventListener('click', () => auth.open());
auth.addEventListener('change', () => {
  tokenBtn.hidden = !(live.state.status === 'unauthorised' || auth.state === 'needed' || auth.token());
  tokenBtn.classList.toggle('hot', auth.state === 'needed');
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
        const secs = Math.max(0, Math.ceil((s.retryAt - Date.now()) / 1000));
        return `Disconnected · retrying in ${secs}s`;
      }
      case 'offline': return s.detail ? `Offline · ${s.detail}` : 'Offline';
      case 'unauthorised': return 'Not authorised';
      default: return s.status;
    }
  };
  connLabel.textContent = label();
  tokenBtn.hidden = !(s.status === 'unauthorised' || auth.state === 'needed' || auth.token());
  conn.title = s.status === 'connected' ? 'Live updates over WebSocket (graphql-transport-ws)' : 'Live updates paused; the dashboard reconnects by itself';
  if (s.status === 'waiting') countdown = setInterval(() => { connLabel.textContent = label(); }, 1000);
});

document.getElementById('skip-link').addEventListener('click', (e) => {
  e.preventDefault();
  main.focus();
});

live.start();
notices.start();
// Every session's log: views refresh what they show when something changed.
live.subscribe('subscription { stateEvents { sequence kind } }', {}, {
  next: (d) => bus.dispatchEvent(new CustomEvent('event', { detail: d.stateEvents })),
  error: () => {},
});
live.onReconnect(() => bus.dispatchEvent(new Event('reconnect')));
auth.addEventListener('token', () => bus.dispatchEvent(new Event('reconnect')));
// M (the material watermark) moves without a new notice: re-read pending notices.
bus.addEventListener('event', () => { if (notices.byPair.size) notices.reconcileSoon(); });
setInterval(() => refreshTimes(main), 10000);

window.addEventListener('hashchange', render);
render();
