// Freshness of the dashboard's panels: one source of truth for "is what I see live?".
//
// Every panel that shows server state registers here with its load function. Its
// state follows from the connection (Live) and its own last load:
//
//   live          the connection is up and the last load succeeded;
//   reconnecting  the connection is down: the panel is dimmed and says when it was
//                 last updated;
//   stale         its last load failed (dimmed, with the time of the last good load);
//                 it reloads itself when the connection is back, and every few seconds
//                 while the connection is up;
//   unauthorised  the server refused the token: a state of its own, with a button
//                 that opens the token dialog (never "nothing pending");
//   loading       the first load is under way.
//
// A panel that was shown while the connection was down reloads when it is back, so
// nothing missed meanwhile stays missing.
//
// An outage (the server cannot be reached, or answers UNAVAILABLE) and a refused token
// (UNAUTHENTICATED) are said once, in the page's banner, however many panels they
// stop: a panel shows only its chip then. A panel's own alert is for what concerns it
// alone (FORBIDDEN for its agent, a bad argument).

import { h, fill } from './dom.js';
import { isAuthError, errorText, NetworkError } from './gql.js';

const RETRY_EVERY_MS = 3000;

function clock(t) {
  return new Date(t).toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' });
}

/** isOutage reports an error that means the service, not this panel, is unwell. */
export function isOutage(err) {
  return err instanceof NetworkError || (!!err && err.code === 'UNAVAILABLE');
}

/** isUnauthenticated reports a refusal of the page's token (none, or not valid). */
function isUnauthenticated(err) {
  return !!err && err.code === 'UNAUTHENTICATED';
}

/** pageWide reports an error the page banner says once, for every panel it stops. */
function pageWide(err) {
  return isOutage(err) || isUnauthenticated(err);
}

export class Panels {
  /** banner is the page's one outage element (index.html #outage). */
  constructor(live, auth, banner) {
    this.live = live;
    this.auth = auth;
    this.banner = banner;
    this.all = new Set();
    this.connected = false;
    this.everConnected = false;
    this.downSince = 0;
    live.onState((s) => {
      const was = this.connected;
      this.connected = s.status === 'connected';
      if (this.connected) { this.everConnected = true; this.downSince = 0; } else if (!this.downSince && (was || s.status !== 'connecting')) this.downSince = Date.now();
      for (const p of this.all) {
        if (!this.connected && was) p.missed = true;
        if (this.connected && (p.state === 'failed' || p.missed)) p.run();
        else p.paint();
      }
      this.paintOutage();
    });
    if (auth) auth.addEventListener('token', () => { for (const p of this.all) if (p.state === 'failed') p.run(); });
    this.timer = setInterval(() => {
      if (!this.connected) return;
      for (const p of this.all) if (p.state === 'failed' && !p.running && !(p.error && isAuthError(p.error))) p.run();
    }, RETRY_EVERY_MS);
  }

  /**
   * paintOutage shows the one outage banner while the live connection is down (after
   * it was up, or when it never came) or a panel's last load met an outage.
   */
  paintOutage() {
    const b = this.banner;
    if (!b) return;
    const status = this.live.state.status;
    const refused = [...this.all].some((p) => p.state === 'failed' && isUnauthenticated(p.error));
    if (refused || (status === 'unauthorised' && this.all.size)) {
      if (b.dataset.outage === 'unauthorised') return;
      b.dataset.outage = 'unauthorised';
      b.dataset.unauthorised = '';
      b.className = 'banner unauth outage';
      b.hidden = false;
      fill(b, h('strong', null, 'Not authorised. '), 'This server was started with --auth-file: it needs an access token to show this page. ',
        this.auth ? h('button', { type: 'button', class: 'link', onclick: () => this.auth.open() }, 'Enter a token') : null);
      return;
    }
    delete b.dataset.unauthorised;
    b.className = 'banner bad outage';
    const failed = [...this.all].filter((p) => p.state === 'failed' && isOutage(p.error));
    const down = !this.connected && status !== 'unauthorised' && (this.everConnected || status !== 'connecting');
    if (!down && !failed.length) {
      if (!b.hidden) { b.hidden = true; fill(b); delete b.dataset.outage; }
      return;
    }
    const since = this.downSince || Math.min(...failed.map((p) => p.failedAt || Date.now()));
    const unavailable = failed.find((p) => p.error && p.error.code === 'UNAVAILABLE');
    const text = down || !unavailable
      ? `The server cannot be reached (since ${clock(since)}).`
      : `The server answers that it is unavailable: ${errorText(unavailable.error)}`;
    if (b.dataset.outage === text) return;
    b.dataset.outage = text;
    b.hidden = false;
    fill(b, h('strong', null, text), ' What this page shows is from before, dimmed; it reloads by itself when the server answers again.');
  }

  /**
   * add registers a panel: section is its element (it gets data-freshness), head the
   * element the status chip goes into (the panel's alert goes after it), load an async
   * function that renders the panel and throws when it could not, what names the
   * panel's content in the alert ("the watchers"). What the panel showed stays, dimmed,
   * under the alert; mirror lists other elements the load fills (they get the same
   * data-freshness). It returns {run, remove}; run() loads now.
   */
  add(section, head, load, what = 'this panel', mirror = []) {
    const chip = h('span', { class: 'freshness', role: 'status', 'aria-live': 'polite' });
    const alert = h('div', { class: 'panel-alert' });
    head.append(chip);
    head.after(alert);
    const p = {
      state: 'loading', error: null, updatedAt: 0, failedAt: 0, missed: false, running: null, chip, section,
      run: () => {
        if (p.running) { p.again = true; return p.running; }
        p.running = (async () => {
          try {
            await load();
            p.state = 'live';
            p.error = null;
            fill(alert);
            p.updatedAt = Date.now();
            p.missed = !this.connected;
          } catch (err) {
            if (err && err.name === 'AbortError') return;
            if (p.state !== 'failed') p.failedAt = Date.now();
            p.state = 'failed';
            p.error = err;
            if (pageWide(err)) fill(alert); else failure(alert, what, err, this.auth);
            // Never "Loading…" under an error.
            if (!p.updatedAt) for (const sk of section.querySelectorAll('.skeleton')) sk.remove();
          } finally {
            p.running = null;
            p.paint();
            this.paintOutage();
            if (p.again) { p.again = false; p.run(); }
          }
        })();
        p.paint();
        return p.running;
      },
      paint: () => {
        let view = p.state === 'failed' ? (isAuthError(p.error) ? 'unauthorised' : 'stale') : p.state;
        if (view !== 'unauthorised' && !this.connected && p.updatedAt) view = p.state === 'failed' ? 'stale' : 'reconnecting';
        section.dataset.freshness = view;
        for (const m of mirror) m.dataset.freshness = view;
        const since = p.updatedAt ? `updated ${clock(p.updatedAt)}` : 'not loaded yet';
        let text;
        switch (view) {
          case 'live': text = 'live'; break;
          case 'loading': text = 'loading…'; break;
          case 'reconnecting': text = `reconnecting · ${since}`; break;
          case 'unauthorised': text = 'not authorised'; break;
          default: text = `stale · ${since} · retrying`;
        }
        chip.dataset.state = view;
        chip.title = p.updatedAt ? `Last updated ${new Date(p.updatedAt).toLocaleString()}` : '';
        fill(chip, text);
      },
      remove: () => { this.all.delete(p); this.paintOutage(); },
    };
    this.all.add(p);
    p.run();
    return p;
  }
}

/**
 * failure renders a load error into body: "not authorised" (with a button that opens
 * the token dialog) apart from every other failure.
 */
export function failure(body, what, err, auth) {
  if (isAuthError(err)) {
    fill(body, h('div', { class: 'banner unauth', role: 'alert', dataset: { unauthorised: '' } },
      h('strong', null, 'Not authorised. '),
      err.code === 'FORBIDDEN' ? `The token’s role may not read ${what}: ${err.message}. ` : `This server needs an access token to show ${what}. `,
      auth ? h('button', { type: 'button', class: 'link', onclick: () => auth.open() }, 'Enter a token') : null));
    return;
  }
  fill(body, h('div', { class: 'banner bad', role: 'alert', dataset: { loadFailed: '' } },
    `Could not load ${what}: ${errorText(err)} It reloads by itself.`));
}
