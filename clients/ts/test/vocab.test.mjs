// The client's vocabulary and input rules are the service's (CLT-5): the tables equal
// the running binary's schema, and validateEvent refuses exactly what the binary's
// recordEvent refuses, with its code and (for INVALID_ARGUMENT) its message.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EVENT_KINDS, ACTOR_TYPES, RUN_OUTCOMES, RECORD_FIELDS, validateEvent, InvalidEventError } from '../dist/index.js';
import { backends, tempDir, freePort, startServer } from './helpers.mjs';

const introspection = `{
  k: __type(name: "EventKind") { enumValues { name description } }
  a: __type(name: "ActorType") { enumValues { name } }
  o: __type(name: "RunOutcome") { enumValues { name } }
  i: __type(name: "RecordEventInput") { inputFields { name } } }`;

// The role a kind's enum description states (ARCHITECTURE.md, "Adding an event kind").
function roleOf(description) {
  if (description.includes('Notifies watchers.')) return 'notifies';
  if (description.includes('(WAT-2)')) return 'seeds';
  if (description.includes('(LIF-2)')) return 'resets';
  if (description.includes('Kept in the log only')) return 'logOnly';
  return `unknown: ${description}`;
}

const base = { sessionKey: 'agent:main:subagent:vocab', kind: 'compacted', actorType: 'system' };
const with_ = (fields) => ({ ...base, ...fields });
const rep = (s, n) => s.repeat(n);

// Inputs around every rule: each field's valid forms, its limits on either side, and
// its malformed forms, mostly one fault per input.
function corpus() {
  const cases = [];
  const add = (name, input) => cases.push({ name, input });
  add('valid', base);
  for (const k of ['', ' ', '\t', 'agent:main:x', 'AGENT:Main:X', ' agent : main : x ', 'agent::x', 'agent:main', 'agent', 'agent:', 'Agent:',
    'agent:main:x:', 'cron:job-1', 'hook:abc', 'global', 'other-key', 'agent:m@in:x', 'agent:-main:x', 'agent:main:x\n', 'agent:main:\u2028x',
    'agent:main:\u0085x', 'agent:main:\u00a0x', 'agent:\u0130:x', 'agent:' + rep('a', 64) + ':x', 'agent:' + rep('a', 65) + ':x',
    'agent:main:' + rep('x', 501), 'agent:main:' + rep('x', 502), rep('c', 512), rep('c', 513), 'agent:main:' + rep('\u023a', 250),
    'agent:main:' + rep('\u023a', 167), 'agent:main:' + rep('\u023a', 168), rep('\u023a', 170), rep('\u023a', 171), 'AGENT', 'agent:"q":x', 5, 1.5, true, null,
    {}, ['agent:main:x']]) {
    add(`sessionKey ${JSON.stringify(k)}`, with_({ sessionKey: k }));
  }
  add('sessionKey missing', { kind: 'compacted', actorType: 'system' });
  for (const [k, a] of [['cron:job', 'ops'], ['cron:job', 'OPS '], ['cron:job', ''], ['cron:job', 'bad id'], ['cron:job', rep('a', 64)], ['cron:job', rep('a', 65)],
    ['cron:job', '-x'], ['cron:job', '\u0130'], ['cron:job', 'a"b'], ['agent:main:x', 'main'], ['agent:main:x', 'MAIN'], ['agent:main:x', 'ops'],
    ['agent:main:x', null], ['agent:bad!:x', 'bad!'], ['cron:job', 5]]) {
    add(`agentId ${JSON.stringify(a)} of ${k}`, with_({ sessionKey: k, agentId: a }));
  }
  for (const k of [...EVENT_KINDS.map((r) => r.kind), 'nope', '', 'HUMAN_DIRECT_MESSAGE', 'Compacted', 5, true, null]) add(`kind ${JSON.stringify(k)}`, with_({ kind: k }));
  add('kind missing', { sessionKey: base.sessionKey, actorType: 'system' });
  for (const a of [...ACTOR_TYPES, 'robot', 'Human', 'SYSTEM', null]) add(`actorType ${JSON.stringify(a)}`, with_({ actorType: a }));
  for (const a of ['user:alice', '', ' ', 'agent:main:x', 'AGENT:MAIN:X', 'agent:main:x\n', 'a\u2028b', rep('u', 512), rep('u', 513),
    'agent:main:' + rep('\u023a', 167), 'agent:main:' + rep('\u023a', 168), 'agent::', 5]) {
    add(`actorId ${JSON.stringify(a)}`, with_({ actorId: a }));
  }
  for (const s of ['ok', '', '   ', ' padded ', 'a\nb', 'a\rb', 'a\u2029b', 'a\u2028b', 'a\u0007b', 'a\u0085b', 'a\tb', rep('x', 200), rep('x', 201),
    ' ' + rep('x', 200) + ' ', rep('\u{1F600}', 200), rep('\u{1F600}', 201), 'lone \ud800 surrogate', 'tab\u00a0nbsp', 5]) {
    add(`summary ${JSON.stringify(s).slice(0, 40)}`, with_({ summary: s }));
  }
  for (const t of ['2026-01-02T15:04:05Z', new Date().toISOString(), '2026-01-02T15:04:05.123456789+02:00', '2026-01-02T15:04:05,5Z',
    '2026-01-02T1:04:05Z', '2026-01-02 15:04:05', '2026-01-02 15:04:05.5', '2024-02-29T00:00:00Z', '0000-01-01T00:00:00Z',
    '2026-01-02T15:04:05+24:60', '2026-01-02T15:04:05-00:00', 'yesterday', '', '2026-02-30T00:00:00Z', '2023-02-29T00:00:00Z',
    '2026-13-01T00:00:00Z', '2026-00-01T00:00:00Z', '2026-01-00T00:00:00Z', '2026-01-02T24:00:00Z', '2026-01-02T15:60:00Z',
    '2026-01-02T15:04:60Z', '2026-01-02T15:04:05+25:00', '2026-01-02T15:04:05+00:61', '2026-01-02t15:04:05Z', '2026-01-02T15:04:05z',
    '2026-01-02T15:04:05', '2026-01-02T15:04:05.Z', '2026-1-02T15:04:05Z', '2026-01-02T15:4:05Z', '2026-01-02T15:04:05-0700',
    '2026-01-02T15:04:05+01:00 ', ' 2026-01-02T15:04:05Z', '20260-01-02T15:04:05Z', '2026-01-02T123:04:05Z', 5]) {
    add(`occurredAt ${JSON.stringify(t)}`, with_({ occurredAt: t }));
  }
  for (const r of ['r1', '', ' ', rep('r', 256), rep('r', 257), ' ' + rep('r', 256) + ' ', 'a\tb', 5]) add(`runId ${JSON.stringify(r).slice(0, 30)}`, with_({ runId: r }));
  for (const r of EVENT_KINDS) add(`outcome error on ${r.kind}`, with_({ kind: r.kind, outcome: 'error' }));
  for (const o of [...RUN_OUTCOMES, 'bogus', '', 'Error', 5]) add(`outcome ${JSON.stringify(o)}`, with_({ kind: 'run_failed', outcome: o }));
  for (const c of ['WebChat', '', '  ', ' x ', rep('c', 64), rep('c', 65), ' ' + rep('c', 64) + ' ', 'a b', 'a\nb', rep('\u023a', 21), rep('\u023a', 22), 5]) {
    add(`channel ${JSON.stringify(c).slice(0, 30)}`, with_({ kind: 'human_direct_message', actorType: 'human', channel: c }));
  }
  for (const n of [1, 0, -1, 2147483647, 2147483648, -2147483648, -2147483649, 1e19, 1e21, 1.5, '3', '+3', ' 3', '9223372036854775808', 'x', true, {}]) add(`turns ${JSON.stringify(n)}`, with_({ turns: n }));
  for (const d of ['k', '', ' ', ' k ', rep('d', 512), rep('d', 513), 'a\nb', 'a\u0000b', 5]) add(`dedupeKey ${JSON.stringify(d).slice(0, 30)}`, with_({ dedupeKey: d }));
  const many = (n) => Array.from({ length: n }, (_, i) => `agent:main:w${i}`);
  for (const w of [[], ['agent:main:parent'], ['bare-key'], ['agent:main:subagent:vocab'], many(32), many(33), [null], [5], [true], 'agent:main:parent', 5, true]) {
    add(`watchers ${JSON.stringify(w).slice(0, 30)}`, with_({ watchers: w }));
  }
  add('unknown field', with_({ bogus: 1 }));
  add('__typename', with_({ __typename: 'RecordEventInput' }));
  add('a lone surrogate in a field name', with_({ ['\udc00']: 1 }));
  add('two faults: a bool key and an unknown kind', with_({ sessionKey: false, kind: 'nope' }));
  add('two faults: empty key and a string turns', with_({ sessionKey: '', turns: '3' }));
  add('two faults: bad time and a long runId', with_({ occurredAt: 'x', runId: rep('r', 300) }));
  add('two faults: key and summary', with_({ sessionKey: 'agent:', summary: 'a\nb' }));
  return cases;
}

// The service lets an enum value spelt in another case through its variable
// validation (gqlparser compares case-insensitively), then maps it to "" and refuses it
// naming "": the client refuses it with the same code, naming the value it got.
function caseVariant(want, got) {
  return /^(kind|actorType|outcome) "" is not /.test(want.message) && got.message.replace(/"[^"]*"/, '""') === want.message;
}

function local(input) {
  try {
    validateEvent(input);
    return { ok: true };
  } catch (e) {
    assert.ok(e instanceof InvalidEventError, `validateEvent threw ${e}`);
    return { ok: false, code: e.code, message: e.detail };
  }
}

async function remote(s, input) {
  const r = await fetch(s.endpoint, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ query: 'mutation($in: RecordEventInput!) { recordEvent(input: $in) { recorded } }', variables: { in: input } }),
  });
  const body = await r.json();
  if (!body.errors) return { ok: true };
  return { ok: false, code: body.errors[0].extensions?.code, message: body.errors[0].message };
}

for (const b of backends()) {
  test(`vocabulary: the tables are the binary's schema, in order (SIG-1, SIG-2) [${b.name}]`, async () => {
    const dir = tempDir(), db = await b.database(dir);
    const s = await startServer(db.url, await freePort());
    try {
      const { k, a, o, i } = await s.gql(introspection);
      assert.deepEqual(EVENT_KINDS.map((r) => r.kind), k.enumValues.map((v) => v.name), 'EVENT_KINDS');
      assert.deepEqual(EVENT_KINDS.map((r) => r.role), k.enumValues.map((v) => roleOf(v.description)), 'the kinds\' roles');
      assert.deepEqual([...ACTOR_TYPES], a.enumValues.map((v) => v.name), 'ACTOR_TYPES');
      assert.deepEqual([...RUN_OUTCOMES], o.enumValues.map((v) => v.name), 'RUN_OUTCOMES');
      assert.deepEqual([...RECORD_FIELDS], i.inputFields.map((f) => f.name), 'RECORD_FIELDS');
    } finally {
      await s.kill();
      await db.drop();
    }
  });

  test(`vocabulary: record refuses exactly what the service refuses, with its code and message (CLT-5, ERR-1) [${b.name}]`, async () => {
    const dir = tempDir(), db = await b.database(dir);
    const s = await startServer(db.url, await freePort());
    const mismatches = [];
    let refused = 0;
    try {
      const cases = corpus();
      for (const c of cases) {
        const want = await remote(s, c.input), got = local(c.input);
        if (!want.ok) refused++;
        const same = want.ok === got.ok && (want.ok || (want.code === got.code && (want.code !== 'INVALID_ARGUMENT' || want.message === got.message || caseVariant(want, got))));
        if (!same) mismatches.push(`${c.name}: service ${JSON.stringify(want)}, client ${JSON.stringify(got)}`);
      }
      assert.deepEqual(mismatches, [], `${mismatches.length} of ${cases.length} inputs are judged differently`);
      assert.ok(refused > 100 && refused < cases.length - 40, `the corpus has ${refused} refused inputs of ${cases.length}`);
    } finally {
      await s.kill();
      await db.drop();
    }
  });
}

test('vocabulary: values JSON cannot carry are refused, not sent as null', () => {
  for (const turns of [NaN, Infinity]) assert.throws(() => validateEvent(with_({ turns })), InvalidEventError);
});
