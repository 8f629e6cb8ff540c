// Keyboard shortcuts of every view, and the help overlay that lists them ("?").
//
// Notices: j / k move to the next / previous notice card (the focus moves onto it),
// a acknowledges it, r opens its Reconcile page, c copies its text, w opens its
// watcher. / focuses the page's filter. g then n, w, t, h or s goes to a view. Keys
// are ignored while typing in a field, with a modifier held, or while a dialog is
// open; Escape closes the help.

import { h } from './dom.js';

export const SHORTCUTS = [
  ['j', 'Next notice'],
  ['k', 'Previous notice'],
  ['a', 'Acknowledge the current notice'],
  ['r', 'Reconcile: open the current notice’s target at its L'],
  ['c', 'Copy the current notice’s text'],
  ['w', 'Open the current notice’s watcher'],
  ['/', 'Filter (where the page has a filter)'],
  ['g n', 'Go to the notices'],
  ['g w', 'Go to who is stale'],
  ['g t', 'Go to the session tree'],
  ['g h', 'Go to the acknowledgement history'],
  ['g s', 'Go to the sessions'],
  ['?', 'Show this help'],
];

const GO = { n: '#/', w: '#/stale', t: '#/tree', h: '#/acks', s: '#/sessions' };

function typing(el) {
  if (!el || el === document.body) return false;
  const tag = el.tagName;
  return tag === 'INPUT' || tag === 'TEXTAREA' || tag === 'SELECT' || el.isContentEditable;
}

/** cards are the notice cards of the page, in document order. */
function cards(root) {
  return [...root.querySelectorAll('.notice')].filter((c) => c.offsetParent !== null);
}

/** current is the card holding the focus, or the one marked current. */
function current(root) {
  const a = document.activeElement;
  return (a && a.closest && a.closest('.notice')) || root.querySelector('.notice.current');
}

function mark(root, card) {
  for (const c of root.querySelectorAll('.notice.current')) c.classList.remove('current');
  if (!card) return;
  card.classList.add('current');
  if (!card.hasAttribute('tabindex')) card.setAttribute('tabindex', '-1');
  card.focus();
  card.scrollIntoView({ block: 'nearest' });
}

/** installKeys wires the shortcuts for the page whose views render into root. */
export function installKeys(root) {
  const help = buildHelp();
  let pendingG = 0;
  document.addEventListener('keydown', (e) => {
    if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey) return;
    if (document.querySelector('dialog[open]')) return;
    if (typing(e.target)) return;
    const key = e.key;
    if (pendingG && Date.now() - pendingG < 1500) {
      pendingG = 0;
      if (GO[key]) { e.preventDefault(); location.hash = GO[key]; }
      return;
    }
    pendingG = 0;
    const list = cards(root);
    const cur = current(root);
    const i = cur ? list.indexOf(cur) : -1;
    switch (key) {
      case 'j':
        if (list.length) { e.preventDefault(); mark(root, list[Math.min(i + 1, list.length - 1)]); }
        return;
      case 'k':
        if (list.length) { e.preventDefault(); mark(root, list[Math.max(i - 1, 0)]); }
        return;
      case 'a': case 'r': case 'c': case 'w': {
        if (!cur) return;
        const target = {
          a: cur.querySelector('button.ack'),
          r: cur.querySelector('a.reconcile'),
          c: cur.querySelector('button.copy'),
          w: cur.querySelector('.notice-head a[href^="#/watcher/"]'),
        }[key];
        if (!target) return;
        e.preventDefault();
        if (key === 'a') target.focus(); // the card's own logic then moves the focus on
        target.click();
        return;
      }
      case '/': {
        const f = root.querySelector('input[type="search"], [data-filter]');
        if (f) { e.preventDefault(); f.focus(); }
        return;
      }
      case 'g':
        pendingG = Date.now();
        return;
      case '?':
        e.preventDefault();
        help.showModal();
        return;
      default:
    }
  });
  return { help };
}

function buildHelp() {
  const close = h('button', { type: 'button', class: 'primary', value: 'close' }, 'Close');
  const d = h('dialog', { id: 'keys-dialog', 'aria-labelledby': 'keys-h' },
    h('form', { method: 'dialog', class: 'keys-form' },
      h('h2', { id: 'keys-h' }, 'Keyboard shortcuts'),
      h('table', { class: 'keys' },
        h('tbody', null, SHORTCUTS.map(([k, what]) => h('tr', null,
          h('td', null, k.split(' ').map((p, i) => [i ? ' then ' : null, h('kbd', null, p)])),
          h('td', null, what))))),
      h('p', { class: 'small muted' }, 'Tab and Shift+Tab reach every control; Enter presses the focused button.'),
      h('div', { class: 'form-actions' }, close)));
  close.addEventListener('click', () => d.close());
  document.body.append(d);
  return d;
}
