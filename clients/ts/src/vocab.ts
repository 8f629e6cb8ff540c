// The service's vocabulary and input rules for an event (SIG-1, SIG-2, SIG-5, KEY-1..4),
// so that Recorder.record refuses at once what the service would refuse (CLT-5). The
// tables are in schema order; test/vocab.test.mjs holds them to the running binary's
// schema, and every rule to the binary's own answers. The tables themselves are
// vocab_tables.ts, which go generate writes from the service's (internal/vocabgen).
import { AwarenessError, Codes } from './client.js';
import { EVENT_KINDS, ACTOR_TYPES, RUN_OUTCOMES, type KindRole } from './vocab_tables.js';

export { EVENT_KINDS, ACTOR_TYPES, RUN_OUTCOMES, type KindRole };

/** An event kind (the GraphQL EventKind). */
export type EventKind = (typeof EVENT_KINDS)[number]['kind'];
/** Who caused an event (the GraphQL ActorType). */
export type ActorType = (typeof ACTOR_TYPES)[number];
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

/** The fields of RecordEventInput, in schema order (the order the service checks the scalars in). */
export const RECORD_FIELDS = ['sessionKey', 'agentId', 'kind', 'actorType', 'actorId', 'summary', 'occurredAt', 'runId',
  'outcome', 'channel', 'turns', 'dedupeKey', 'watchers'] as const;

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
  if (/^[\x00-\x7f]*$/.test(s)) return s.toLowerCase();
  let out = '';
  for (const ch of s) {
    const l = ch.toLowerCase();
    out += ch === '\u0130' ? 'i' : [...l].length === 1 ? l : ch;
  }
  return out;
}

const bytes = (s: string) => Buffer.byteLength(s, 'utf8');
const runes = (s: string) => [...s];
// With the u flag a paired surrogate is one code point: this matches lone ones only.
const loneSurrogate = /[\ud800-\udfff]/u;

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

// The Go kind (reflect.Kind) the service's variable validation names in its messages.
const goKind = (v: unknown) => (typeof v === 'boolean' ? 'bool' : Array.isArray(v) ? 'slice' : typeof v === 'object' ? 'map' : typeof v);
const truncate40 = (s: string) => (bytes(s) <= 40 ? s : Buffer.from(s).subarray(0, 40).toString() + '…');
// strconv.ParseInt(s, 10, 64) succeeds.
const int64Text = (s: string) => /^[+-]?\d+$/.test(s) && BigInt(s) >= -(2n ** 63n) && BigInt(s) < 2n ** 63n;
const ENUMS: Record<string, [readonly string[], string]> = {
  kind: [EVENT_KINDS.map((r) => r.kind), 'EventKind'], actorType: [ACTOR_TYPES, 'ActorType'], outcome: [RUN_OUTCOMES, 'RunOutcome'],
};
const REQUIRED = new Set(['sessionKey', 'kind', 'actorType']);

/** Every string of a JSON value, keys included. */
function* strings(v: unknown): Generator<string> {
  if (typeof v === 'string') yield v;
  else if (Array.isArray(v)) for (const x of v) yield* strings(x);
  else if (v !== null && typeof v === 'object') for (const [k, x] of Object.entries(v)) { yield k; yield* strings(x); }
}

/**
 * Checks an event as the service checks a RecordEventInput and throws the
 * InvalidEventError it would answer: the request's text (no lone surrogate), then the
 * variable's shape (unknown fields, missing ones, JSON types, unknown enum values:
 * GRAPHQL_VALIDATION_FAILED), then the scalars in field order, then SIG-1..5 and
 * KEY-1..4 (INVALID_ARGUMENT). Undefined and null optional fields count as absent.
 */
export function validateEvent(ev: Record<string, unknown>): void {
  if (ev === null || typeof ev !== 'object' || Array.isArray(ev)) fail('an event must be an object', ValidationFailed);
  for (const s of strings(ev)) {
    if (loneSurrogate.test(s)) fail('request text is not valid UTF-8 or escapes a lone UTF-16 surrogate');
  }
  const has = (f: string) => ev[f] !== undefined && ev[f] !== null;
  const list = (v: unknown) => (Array.isArray(v) ? v : [v]);

  // The variable (gqlparser's VariableValues): unknown fields, then each field in order.
  for (const k of Object.keys(ev)) {
    if (ev[k] !== undefined && k !== '__typename' && !(RECORD_FIELDS as readonly string[]).includes(k)) fail(`unknown field ${JSON.stringify(k)}`, ValidationFailed, k);
  }
  for (const f of RECORD_FIELDS) {
    const v = ev[f];
    if (v === undefined || v === null) {
      if (REQUIRED.has(f)) fail(`${f} ${v === undefined ? 'must be defined' : 'cannot be null'}`, ValidationFailed, f);
      continue;
    }
    if (ENUMS[f]) {
      const [values, type] = ENUMS[f];
      if (typeof v !== 'string' && typeof v !== 'number') fail('enums must be ints or strings', ValidationFailed, f);
      const text = typeof v === 'number' ? JSON.stringify(v) : v;
      if (!values.some((x) => x.toLowerCase() === toLower(text))) fail(`${text} is not a valid ${type}`, ValidationFailed, f);
    } else if (f === 'turns') {
      if (typeof v !== 'string' && typeof v !== 'number') fail(`cannot use ${goKind(v)} as Int`, ValidationFailed, f);
      if (typeof v === 'number' && !Number.isFinite(v)) fail(`turns must be a finite number, got ${v}`, ValidationFailed, f);
      if (!int64Text(typeof v === 'number' ? JSON.stringify(v) : v)) fail('cannot use string as Int', ValidationFailed, f);
    } else if (f === 'watchers') {
      for (const w of list(v)) {
        if (w === null || w === undefined) fail('a watcher cannot be null', ValidationFailed, f);
        if (typeof w !== 'string' && typeof w !== 'number') fail(`cannot use ${goKind(w)} as String`, ValidationFailed, f);
      }
    } else if (f !== 'occurredAt' && typeof v !== 'string' && typeof v !== 'number') {
      fail(`cannot use ${goKind(v)} as String`, ValidationFailed, f);
    }
  }

  // The scalars (gqlgen's unmarshalInputRecordEventInput), in field order.
  for (const f of RECORD_FIELDS) {
    if (!has(f)) continue;
    const v = ev[f];
    const notString = (x: unknown) => typeof x === 'number' && fail(`String must be a JSON string, got ${truncate40(JSON.stringify(x))}`, Codes.InvalidArgument, f);
    if (f === 'occurredAt') {
      if (typeof v !== 'string' || !validTime(v)) fail(timeMessage, Codes.InvalidArgument, f);
    } else if (f === 'turns') {
      if (typeof v === 'string') fail(`Int must be a JSON number, not the string ${quote(truncate40(v))}`, Codes.InvalidArgument, f);
      if (Math.abs(v as number) > LIMITS.maxInt + ((v as number) < 0 ? 1 : 0)) {
        fail(`Int must be a whole number from -2147483648 to 2147483647 (32 bits), got ${truncate40(JSON.stringify(v))}`, Codes.InvalidArgument, f);
      }
    } else if (f === 'watchers') {
      list(v).forEach(notString);
    } else {
      notString(v);
    }
  }

  // ValidateRecord (internal/awareness/event.go), in its order.
  resolveSession(ev.sessionKey as string, has('agentId') ? (ev.agentId as string) : undefined);
  const kind = EVENT_KINDS.find((r) => r.kind === ev.kind);
  if (!kind) fail(`kind ${q(ev.kind as string)} is not an event kind`);
  if (!(ACTOR_TYPES as readonly unknown[]).includes(ev.actorType)) fail(`actorType ${q(ev.actorType as string)} is not ${oneOf(ACTOR_TYPES)}`);
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
  if (has('outcome')) {
    if (!kind.outcome) fail(`outcome is only allowed on ${oneOf(EVENT_KINDS.filter((r) => r.outcome).map((r) => r.kind))}, not on ${kind.kind}`);
    if (!(RUN_OUTCOMES as readonly unknown[]).includes(ev.outcome)) fail(`outcome ${q(ev.outcome as string)} is not ${oneOf(RUN_OUTCOMES)}`);
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
  if (has('watchers') && list(ev.watchers).length > LIMITS.watchersPerEvent) {
    fail(`at most ${LIMITS.watchersPerEvent} watchers per event, got ${list(ev.watchers).length}`);
  }
}
