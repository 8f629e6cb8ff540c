// The event kinds as the service holds them (the eventKinds query, SIG-1): the chart's
// and the filters' list, each kind's badge and colour. Nothing here names the kinds, so
// a kind added to the service needs no change to the dashboard.

import { gql } from './gql.js';

// Colours in the order of the service's kinds; kinds past the palette get hues of their own.
const PALETTE = ['#f59e0b', '#ef4444', '#a855f7', '#3b82f6', '#22c55e', '#b91c1c', '#94a3b8', '#14b8a6',
  '#0ea5e9', '#eab308', '#475569'];

let rows = [];
let pending = null;
const listeners = [];

/** onKinds calls fn whenever the kinds are (re)read: what was drawn before can take them. */
export function onKinds(fn) { listeners.push(fn); }

function set(list) {
  rows = list;
  for (const fn of listeners) fn();
}

/**
 * loadKinds reads the kinds once; after a failure the next call asks again. It never
 * opens the token dialog (the views' own requests do; the chart's brings the kinds too).
 */
export function loadKinds() {
  if (rows.length) return Promise.resolve(rows);
  pending ??= gql('query EventKinds { eventKinds { kind role } }', {}, { quiet: true }).then(
    (d) => { set(d.eventKinds); return rows; },
    (err) => { pending = null; throw err; });
  return pending;
}

/** setKinds keeps the kinds a query read beside its own data. */
export function setKinds(list) {
  if (list && list.length && JSON.stringify(list) !== JSON.stringify(rows)) set(list);
}

/** eventKinds lists the kinds in the service's order ([] before the first load). */
export function eventKinds() { return rows.map((r) => r.kind); }

/** roleOf is a kind's role (notifies, seeds, logOnly, resets), undefined when unknown. */
export function roleOf(kind) { return rows.find((r) => r.kind === kind)?.role; }

/** colourOf is a kind's colour: by its place in the service's list, else by its name. */
export function colourOf(kind) {
  let i = rows.findIndex((r) => r.kind === kind);
  if (i < 0) i = rows.length + [...kind].reduce((a, c) => (a * 31 + c.codePointAt(0)) % 997, 0);
  return i < PALETTE.length ? PALETTE[i] : `hsl(${Math.round((i * 137.5) % 360)} 55% 48%)`;
}
