// The bearer token of a server started with --auth-file, and the one dialog that asks
// for it. Without an auth file the server needs none and the dialog never shows.
//
// However many requests fail at once (a session page sends several), they all wait on
// the same dialog: request() returns the one pending answer. Cancel leaves the page in
// the "not authorised" state (state 'needed'), distinct from an empty answer; the
// header's Token button opens the dialog again. The input is a password field: the
// token is never shown in clear.

import { h } from './dom.js';

const TOKEN_KEY = 'awareness.token';

export class Auth extends EventTarget {
  constructor() {
    super();
    // 'ok': no refusal seen (or the token works); 'needed': the server refused this
    // page's token (or it has none) and no new one was entered.
    this.state = 'ok';
    this.pending = null;
    this.memory = '';
    this.dialog = null;
    this.refusedOnce = false;
  }

  /** token returns the stored bearer token, or ''. */
  token() {
    try { return localStorage.getItem(TOKEN_KEY) || this.memory; } catch { return this.memory; }
  }

  setToken(t) {
    this.memory = t;
    try {
      if (t) localStorage.setItem(TOKEN_KEY, t); else localStorage.removeItem(TOKEN_KEY);
    } catch { /* private mode: kept in memory for this page */ }
  }

  setState(s) {
    if (this.state === s) return;
    this.state = s;
    this.dispatchEvent(new Event('change'));
  }

  /** ok marks the current token as accepted. */
  ok() { this.setState('ok'); }

  /**
   * refused is called for every 401. The first refusal of a burst opens the dialog
   * (unless the person cancelled it: then only the Token button reopens it); every
   * caller gets the same promise, true when a new token was entered.
   */
  refused() {
    if (this.pending) return this.pending;
    if (this.state === 'needed' && this.cancelled) return Promise.resolve(false);
    this.setState('needed');
    return this.open(this.refusedOnce ? 'The server refused this token. Enter another one.' : null);
  }

  /** open shows the dialog (the header's Token button); resolves true on a new token. */
  open(message) {
    if (this.pending) return this.pending;
    this.refusedOnce = true;
    this.pending = new Promise((resolve) => {
      const d = this.build();
      const input = d.querySelector('input');
      const msg = d.querySelector('.auth-msg');
      msg.textContent = message || (this.token() ? 'The server refused the stored token. Enter another one.' : 'This server was started with --auth-file: it needs an access token.');
      input.value = '';
      const done = (value) => {
        d.removeEventListener('close', onClose);
        if (d.open) d.close();
        this.pending = null;
        if (value) {
          this.cancelled = false;
          this.setToken(value);
          this.setState('ok'); // until the server says otherwise
          this.dispatchEvent(new Event('token'));
          resolve(true);
        } else {
          this.cancelled = true;
          this.setState('needed');
          resolve(false);
        }
      };
      const onClose = () => done(d.returnValue === 'ok' ? input.value.trim() : '');
      d.addEventListener('close', onClose);
      d.returnValue = '';
      d.dataset.prompts = String(Number(d.dataset.prompts || 0) + 1); // how often it was shown (tests)
      d.showModal();
      input.focus();
    });
    return this.pending;
  }

  build() {
    if (this.dialog) return this.dialog;
    const input = h('input', { type: 'password', id: 'auth-token', name: 'token', autocomplete: 'current-password', spellcheck: 'false', required: true });
    const form = h('form', { method: 'dialog', class: 'auth-form' },
      h('h2', { id: 'auth-h' }, 'Access token'),
      h('p', { class: 'auth-msg' }),
      h('div', { class: 'field' }, h('label', { for: 'auth-token' }, 'Token'), input),
      h('div', { class: 'form-actions' },
        h('button', { type: 'submit', class: 'primary', value: 'ok' }, 'Use token'),
        h('button', { type: 'button', class: 'auth-cancel' }, 'Cancel')));
    const d = h('dialog', { id: 'auth-dialog', 'aria-labelledby': 'auth-h' }, form);
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      if (!input.value.trim()) { input.focus(); return; }
      d.close('ok');
    });
    form.querySelector('.auth-cancel').addEventListener('click', () => d.close(''));
    document.body.append(d);
    this.dialog = d;
    return d;
  }
}
