// The service's vocabulary and input rules for an event (SIG-1, SIG-2, SIG-5, KEY-1..4),
// so that Recorder.record refuses at once what the service would refuse (CLT-5). The
// tables are in schema order; test/vocab.test.mjs holds them to the running binary's
// schema, and every rule to the binary's own answers.
import { AwarenessError, Codes } from './client.js';

/** What an event kind does to the cursors of its session's watchers (SIG-1, NTC-4, WAT-2). */
export type KindRole = 'notifies' | 'seeds' | 'logOnly';

/** The event kinds, in schema order, with their role and whether they take the outcome payload field. */
export const EVENT_KINDS = [
  { kind: 'human_direct_message', role: 'notifies', outcome: false },
  { kind: 'upstream_missing', role: 'notifies', outcome: false },
  { kind: 'goal_changed', role: 'notifies', outcome: false },
  { kind: 'child_spawned', role: 'seeds', outcome: false },
  { kind: 'run_completed', role: 'logOnly', outcome: false },
  { kind: 'run_failed', role: 'logOnly', outcome: true },
  { kind: 'compacted', role: 'logOnly', outcome: false },
  { kind: 'adopted', role: 'logOnly', outcome: false },
] as const satisfies readonly { kind: string; role: KindRole; outcome: boolean }[];

/** An event kind (the GraphQL EventKind). */
export type EventKind = (typeof EVENT_KINDS)[number]['kind'];

/** The actor types, in schema order. */
export const ACTOR_TYPES = ['human', 'agent', 'system'] as const;
/** Who caused an event (the GraphQL ActorType). */
export type ActorType = (typeof ACTOR_TYPES)[number];

/** The outcomes of a failed run, in schema order. */
export const RUN_OUTCOMES = ['cancelled', 'timeout', 'error'] as const;
/** How a run_failed run ended (the GraphQL RunOutcome). */
export type RunOutcome = (typeof RUN_OUTCOMES)[number];

/** The service's limits on event fields (SIG-2, KEY-4). */
export const LIMITS = {
  keyBytes: 512,
  summaryChars: 200,
  actorIdBytes: 512,
  runIdBytes: 256,
  channelBytes: 64,
  dedupeKeyBytes: 512,
  watchersPerEvent: 32,
  /** The Int scalar: 32 bits. */
  maxInt: 2 ** 31 - 1,
} as const;

/** The GraphQL validation code of a refused variable (wrong type, unknown field, unknown enum value). */
export const ValidationFailed = 'GRAPHQL_VALIDATION_FAILED';

/**
 * An event the service would refuse, refused by record() before anything is spooled.
 * code and message are what the service answers for the same input.
 */
export class InvalidEventError extends AwarenessError {
  constructor(message: string, code: string = Codes.InvalidArgument, readonly field?: string) {
    super(message, code, 0);
    this.name = 'InvalidEventError';
  }
}

// The fields of RecordEventInput, in schema order (the order the service checks the
// scalars in).
const FIELDS = ['sessionKey', 'agentId', 'kind', 'actorType', 'actorId', 'summary', 'occurredAt', 'runId',
  'outcome', 'channel', 'turns', 'dedupeKey', 'watchers'] as const;
const STRING_FIELDS = new Set(['sessionKey', 'agentId', 'actorId', 'summary', 'runId', 'channel', 'dedupeKey']);

// Go's notions of a space (unicode.IsSpace: White_Space), a control character
// (unicode.IsControl: Cc), a printable rune (strconv.IsPrint) and the line separators
// the service refuses with them.
const space = /^\p{White_Space}+|\p{White_Space}+$/gu;
const controlOrBreak = /[\p{Cc}\u2028\u2029]/u;
const printable = /^[\p{L}\p{M}\p{N}\p{P}\p{S} ]$/u;
const agentIdPattern = /^[a-z0-9][a-z0-9_-]{0,63}$/;

/** strings.TrimSpace. */
export function trimSpace(s: string): string { return s.replace(space, ''); }

/** strings.ToLower: simple case mapping, rune by rune (U+0130 → i, Σ → σ everywhere). */
export function toLower(s: string): string {
  let out = '';
  for (const ch of s) {
    const l = ch.toLowerCase();
    out += ch === '\u0130' ? 'i' : [...l].length === 1 ? l : ch;
  }
  return out;
}

const bytes = (s: string) => Buffer.byteLength(s, 'utf8');
// A lone surrogate reaches the service as U+FFFD (its JSON decoder replaces it).
const runes = (s: string) => [...s].map((c) => (c.length === 1 && c >= '\ud800' && c <= '\udfff' ? '\ufffd' : c));

/** The service's truncateForMessage: 80 bytes at most, control characters and line breaks as '?'. */
function truncateForMessage(s: string): string {
  let out = '';
  for (let r of runes(s)) {
    if (controlOrBreak.test(r)) r = '?';
    out += r;
    if (bytes(out) >= 80) return out + '…';
  }
  return out;
}

/** Go's %q (strconv.Quote) of a valid string. */
function quote(s: string): string {
  let out = '"';
  for (const r of runes(s)) {
    if (r === '"' || r === '\\') out += '\\' + r;
    else if (printable.test(r)) out += r;
    else {
      const esc: Record<string, string> = { '\x07': '\\a', '\b': '\\b', '\f': '\\f', '\n': '\\n', '\r': '\\r', '\t': '\\t', '\v': '\\v' };
      const cp = r.codePointAt(0)!;
      out += esc[r] ?? (cp < 0x20 || cp === 0x7f ? '\\x' + hex(cp, 2) : cp < 0x10000 ? '\\u' + hex(cp, 4) : '\\U' + hex(cp, 8));
    }
  }
  return out + '"';
}
const hex = (n: number, w: number) => n.toString(16).padStart(w, '0');
const q = (s: string) => quote(truncateForMessage(s));

/** oneOf: "a, b or c". */
const oneOf = (vs: readonly string[]) => vs.slice(0, -1).join(', ') + (vs.length > 1 ? ' or ' : '') + vs[vs.length - 1];

function fail(message: string, code?: string, field?: string): never {
  throw new InvalidEventError(message, code, field);
}

/** The parts of an agent-qualified key (KEY-1), or null: trimmed, lowercased, empty segments dropped. */
export function parseSessionKey(raw: string): { agentId: string; rest: string; key: string } | null {
  const s = toLower(trimSpace(raw));
  if (s === '') return null;
  const segs = s.split(':').map(trimSpace).filter((p) => p !== '');
  if (segs.length < 3 || segs[0] !== 'agent' || segs[1] === '') return null;
  const rest = segs.slice(2).join(':');
  return { agentId: segs[1], rest, key: `agent:${segs[1]}:${rest}` };
}

function checkKeyBytes(what: string, raw: string) {
  if (raw === '' || trimSpace(raw) === '') fail(`${what} is empty`);
  if (bytes(raw) > LIMITS.keyBytes) fail(`${what} is ${bytes(raw)} bytes; the limit is ${LIMITS.keyBytes}`);
  if (controlOrBreak.test(raw)) fail(`${what} contains a control character or line break`);
}

function checkCanonicalBytes(what: string, raw: string, canon: string) {
  if (bytes(canon) > LIMITS.keyBytes) fail(`${what} ${q(raw)} is ${bytes(canon)} bytes once lowercased; the limit is ${LIMITS.keyBytes}`);
}

function checkLine(what: string, s: string, maxBytes: number) {
  if (s === '') fail(`${what} is empty; omit it instead`);
  if (bytes(s) > maxBytes) fail(`${what} is ${bytes(s)} bytes; the limit is ${maxBytes}`);
  if (controlOrBreak.test(s)) fail(`${what} contains a control character or line break`);
}

/** Checks a session key and its optional agent (KEY-1..4) and returns the canonical (agentId, key). */
export function resolveSession(key: string, agentId?: string): { agentId: string; key: string } {
  checkKeyBytes('sessionKey', key);
  let agent = '';
  if (agentId !== undefined) {
    agent = toLower(trimSpace(agentId));
    if (!agentIdPattern.test(agent)) fail(`agentId ${q(agentId)} is not a valid agent id ([a-z0-9][a-z0-9_-]{0,63})`);
  }
  const p = parseSessionKey(key);
  if (p) {
    if (!agentIdPattern.test(p.agentId)) fail(`sessionKey ${q(key)} has an invalid agent id`);
    if (agent !== '' && agent !== p.agentId) fail(`agentId ${quote(agent)} contradicts the agent ${quote(p.agentId)} of sessionKey`);
    checkCanonicalBytes('sessionKey', key, p.key);
    return { agentId: p.agentId, key: p.key };
  }
  const canon = toLower(trimSpace(key));
  if (canon === 'agent' || canon.startsWith('agent:')) fail(`sessionKey ${q(key)} is malformed: want agent:<agentId>:<rest>`);
  checkCanonicalBytes('sessionKey', key, canon);
  return { agentId: agent || 'main', key: canon };
}

/** The canonical form of a watcher key, which must be agent-qualified (KEY-3, WAT-1); throws InvalidEventError otherwise. */
export function resolveWatcher(key: string): string {
  try {
    if (typeof key !== 'string') fail('watcher must be a string');
    checkKeyBytes('watcher', key);
    const p = parseSessionKey(key);
    if (!p) fail(`watcher ${q(key)} is not an agent-qualified session key (agent:<agentId>:<rest>); bare keys cannot watch`);
    if (!agentIdPattern.test(p.agentId)) fail(`watcher ${q(key)} has an invalid agent id`);
    checkCanonicalBytes('watcher', key, p.key);
    return p.key;
  } catch (e) {
    throw new AwarenessError((e as InvalidEventError).detail, Codes.InvalidArgument, 0);
  }
}

const timeMessage = 'Time must be an RFC 3339 timestamp such as 2026-01-02T15:04:05Z';
// What the service's Time scalar parses (Go's time.Parse with RFC3339Nano, RFC3339 or
// DateTime): the hour may have one digit, a fraction may use a comma.
const rfc3339 = /^(\d{4})-(\d{2})-(\d{2})T(\d{1,2}):(\d{2}):(\d{2})(?:[.,]\d+)?(?:Z|[+-](\d{2}):(\d{2}))$/;
const dateTime = /^(\d{4})-(\d{2})-(\d{2}) (\d{1,2}):(\d{2}):(\d{2})(?:[.,]\d+)?$/;

/** Whether the service's Time scalar takes s. */
export function validTime(s: string): boolean {
  const m = rfc3339.exec(s) ?? dateTime.exec(s);
  if (!m) return false;
  const [y, mo, d, h, mi, se] = m.slice(1, 7).map(Number);
  const days = new Date(Date.UTC(2000, mo, 0)).getUTCDate() - (mo === 2 && !(y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0)) ? 1 : 0);
  if (mo < 1 || mo > 12 || d < 1 || d > days || h > 23 || mi > 59 || se > 59) return false;
  return m[7] === undefined || (Number(m[7]) <= 24 && Number(m[8]) <= 60);
}

// fmt.Sprint of a decoded JSON value, as the service prints it in a scalar's message.
function goSprint(v: unknown): string {
  if (Array.isArray(v)) return '[' + v.map(goSprint).join(' ') + ']';
  if (v !== null && typeof v === 'object') {
    return 'map[' + Object.keys(v).sort().map((k) => `${k}:${goSprint((v as Record<string, unknown>)[k])}`).join(' ') + ']';
  }
  return JSON.stringify(v) === undefined ? String(v) : typeof v === 'string' ? v : JSON.stringify(v);
}
const truncate40 = (s: string) => (bytes(s) <= 40 ? s : Buffer.from(s).subarray(0, 40).toString() + '…');

/**
 * Checks an event as the service checks a RecordEventInput and throws the
 * InvalidEventError it would answer: the variable's shape first (unknown fields,
 * missing ones, unknown enum values: GRAPHQL_VALIDATION_FAILED), then the scalars in
 * field order, then SIG-1..5 and KEY-1..4 (INVALID_ARGUMENT). Undefined and null
 * optional fields count as absent.
 */
export function validateEvent(ev: Record<string, unknown>): void {
  if (ev === null || typeof ev !== 'object' || Array.isArray(ev)) fail('an event must be an object', ValidationFailed);
  const has = (f: string) => ev[f] !== undefined && ev[f] !== null;
  for (const k of Object.keys(ev)) {
    if (!(FIELDS as readonly string[]).includes(k) && ev[k] !== undefined) fail(`unknown field ${JSON.stringify(k)}`, ValidationFailed, k);
  }
  for (const f of ['sessionKey', 'kind', 'actorType']) {
    if (!(f in ev) || ev[f] === undefined) fail(`${f} must be defined`, ValidationFailed, f);
    if (ev[f] === null) fail(`${f} cannot be null`, ValidationFailed, f);
  }
  const enums: [string, readonly string[], string][] = [
    ['kind', EVENT_KINDS.map((r) => r.kind), 'EventKind'], ['actorType', ACTOR_TYPES, 'ActorType'], ['outcome', RUN_OUTCOMES, 'RunOutcome'],
  ];
  for (const [f, values, type] of enums) {
    if (has(f) && !values.includes(ev[f] as string)) fail(`${goSprint(ev[f])} is not a valid ${type}`, ValidationFailed, f);
  }
  let watchers: unknown[] = [];
  if (has('watchers')) {
    watchers = typeof ev.watchers === 'string' ? [ev.watchers] : Array.isArray(ev.watchers) ? ev.watchers : fail('watchers must be a list of strings', ValidationFailed, 'watchers');
    if (watchers.some((w) => w === null || w === undefined)) fail('a watcher cannot be null', ValidationFailed, 'watchers');
  }
  if (has('turns') && (typeof ev.turns !== 'number' || !Number.isInteger(ev.turns)) && typeof ev.turns !== 'string') {
    fail(`turns must be a whole number, got ${goSprint(ev.turns)}`, ValidationFailed, 'turns');
  }

  for (const f of FIELDS) {
    if (!has(f)) continue;
    const v = ev[f];
    if (STRING_FIELDS.has(f) && typeof v !== 'string') fail(`String must be a JSON string, got ${truncate40(goSprint(v))}`, Codes.InvalidArgument, f);
    if (f === 'occurredAt' && (typeof v !== 'string' || !validTime(v))) fail(timeMessage, Codes.InvalidArgument, f);
    if (f === 'turns') {
      if (typeof v === 'string') fail(`Int must be a JSON number, not the string ${quote(truncate40(v))}`, Codes.InvalidArgument, f);
      if (Math.abs(v as number) > LIMITS.maxInt + (v as number < 0 ? 1 : 0)) {
        fail(`Int must be a whole number from -2147483648 to 2147483647 (32 bits), got ${truncate40(JSON.stringify(v))}`, Codes.InvalidArgument, f);
      }
    }
    if (f === 'watchers') {
      for (const w of watchers) if (typeof w !== 'string') fail(`String must be a JSON string, got ${truncate40(goSprint(w))}`, Codes.InvalidArgument, f);
    }
  }

  // ValidateRecord (internal/awareness/event.go), in its order.
  resolveSession(ev.sessionKey as string, has('agentId') ? (ev.agentId as string) : undefined);
  const kind = EVENT_KINDS.find((r) => r.kind === ev.kind)!;
  if (has('actorId')) {
    let a = trimSpace(ev.actorId as string);
    checkLine('actorId', a, LIMITS.actorIdBytes);
    const p = parseSessionKey(a);
    if (p) {
      a = p.key;
      if (bytes(a) > LIMITS.actorIdBytes) fail(`actorId is ${bytes(a)} bytes once lowercased; the limit is ${LIMITS.actorIdBytes}`);
    }
  }
  if (has('runId')) checkLine('runId', trimSpace(ev.runId as string), LIMITS.runIdBytes);
  if (has('dedupeKey')) {
    if (ev.dedupeKey === '') fail('dedupeKey is empty; omit it instead');
    checkLine('dedupeKey', ev.dedupeKey as string, LIMITS.dedupeKeyBytes);
  }
  if (has('outcome') && !kind.outcome) {
    fail(`outcome is only allowed on ${oneOf(EVENT_KINDS.filter((r) => r.outcome).map((r) => r.kind))}, not on ${kind.kind}`);
  }
  if (has('channel')) {
    const c = toLower(trimSpace(ev.channel as string));
    if (c === '') fail('channel is empty; omit it instead');
    checkLine('channel', c, LIMITS.channelBytes);
  }
  if (has('turns') && (ev.turns as number) < 1) fail(`turns must be between 1 and 9007199254740991, got ${ev.turns}`);
  if (has('summary')) {
    const s = trimSpace(ev.summary as string);
    if (s === '') fail('summary is empty; omit it to get the canonical summary');
    if (/[\r\n\u2028\u2029]/.test(s)) fail('summary must be one line');
    if (/\p{Cc}/u.test(s)) fail('summary contains a control character');
    const n = runes(s).length;
    if (n > LIMITS.summaryChars) fail(`summary is ${n} characters; the limit is ${LIMITS.summaryChars}`);
  }
  if (watchers.length > LIMITS.watchersPerEvent) fail(`at most ${LIMITS.watchersPerEvent} watchers per event, got ${watchers.length}`);
}
