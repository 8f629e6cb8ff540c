// The plugin against the real service binary, through a stand-in of OpenClaw's API:
// config checks, the mirror mapping of each hook, inject's drain/ack/release, the
// wake, the awareness_status tool, and one process-wide state across registrations.
import test from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import plugin, { parseConfig, configJsonSchema, closeBridge, settled, Bridge, HEADER, TOOL_NAME } from '../dist/index.js';
import { startService, fakeApi, tempDir, waitFor, sleep } from './helpers.mjs';

const parent = 'agent:main:main';
const child = 'agent:main:subagent:c1';
const noticeText = (target, l) => `Session "${target}" changed (other actor). Reconcile before acting: awareness_status sessionKey "${target}" changesSince ${l}.`;

/** Registers the plugin on a fresh fake API and starts its service (the gateway does). */
async function setup(svc, config = {}, opts = {}) {
  const api = fakeApi({ pluginConfig: { url: svc.url, ...config }, stateDir: tempDir(), ...opts });
  plugin.register(api);
  await api.start();
  return api;
}

const agentCtx = (sessionKey, runId, extra = {}) => ({ sessionKey, agentId: 'main', runId, trigger: 'user', ...extra });
const prompt = async (api, sessionKey, runId, messages = [{ role: 'user' }]) =>
  (await api.fire('before_prompt_build', { prompt: 'hi', messages }, agentCtx(sessionKey, runId)))[0];
// OpenClaw does not wait for agent_end's work (the acknowledgement); the tests do.
const end = async (api, sessionKey, runId, success = true) => {
  await api.fire('agent_end', { runId, success, messages: [] }, agentCtx(sessionKey, runId));
  await settled();
};

test.afterEach(async () => { await closeBridge(); });

test('config: every problem is named, the manifest declares the same schema', () => {
  const bad = (raw) => { const r = parseConfig(raw); assert.equal(r.success, false, JSON.stringify(raw)); return r.error.issues.map((i) => i.message).join('\n'); };
  assert.match(bad(undefined), /needs a config object with at least "url"/);
  assert.match(bad({}), /"url" is required/);
  assert.match(bad({ url: 'not a url' }), /is not a URL/);
  assert.match(bad({ url: 'ftp://x/query' }), /want an http/);
  assert.match(bad({ url: 'http://127.0.0.1:1/query', mode: 'both' }), /"mode" "both": want "mirror"/);
  assert.match(bad({ url: 'http://127.0.0.1:1/query', tokenFile: 'relative.txt' }), /"tokenFile" must be an absolute file path/);
  assert.match(bad({ url: 'http://127.0.0.1:1/query', tokenFile: '/nonexistent/token' }), /cannot be read/);
  assert.match(bad({ url: 'http://127.0.0.1:1/query', agentIds: { main: 'Bad Id' } }), /is not an agent id/);
  assert.match(bad({ url: 'http://127.0.0.1:1/query', agentIds: { a: 'x', b: 'x' } }), /maps both "a" and "b" to "x"/);
  assert.match(bad({ url: 'http://127.0.0.1:1/query', maxNoticeChars: 10 }), /from 200 to 100000/);
  assert.match(bad({ url: 'http://127.0.0.1:1/query', wake: 'yes' }), /"wake"/);
  assert.match(bad({ url: 'http://127.0.0.1:1/query', unknown: 1 }), /unknown config key "unknown"/);
  const two = bad({ mode: 'x', wake: 1 });
  assert.match(two, /"url" is required/);
  assert.match(two, /"mode"/);
  const ok = parseConfig({ url: 'http://127.0.0.1:8080/query' });
  assert.deepEqual(ok, { success: true, data: { url: 'http://127.0.0.1:8080/query', mode: 'mirror', agentIds: {}, maxNoticeChars: 9000, wake: true } });
  assert.deepEqual(parseConfig(ok.data), ok, 'the parsed config parses again to itself (OpenClaw hands register() the parsed data)');
  const manifest = JSON.parse(readFileSync(new URL('../openclaw.plugin.json', import.meta.url), 'utf8'));
  assert.equal(manifest.id, plugin.id);
  assert.deepEqual(Object.keys(manifest.configSchema.properties).sort(), Object.keys(configJsonSchema.properties).sort());
  assert.deepEqual(manifest.configSchema.required, configJsonSchema.required);
  assert.deepEqual(manifest.contracts.tools, [TOOL_NAME]);
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
  assert.deepEqual(pkg.openclaw.extensions, ['./dist/index.js']);
});

test('register refuses a bad config with its message; a good one registers the hooks, the tool and the service', () => {
  assert.throws(() => plugin.register(fakeApi({ pluginConfig: { url: 'x', mode: 'inject' } })), /"url" "x" is not a URL/);
  const api = fakeApi({ pluginConfig: { url: 'http://127.0.0.1:1/query' } });
  plugin.register(api);
  assert.deepEqual(Object.keys(api.hooks).sort(), ['after_compaction', 'after_tool_call', 'agent_end', 'before_prompt_build', 'before_reset',
    'model_call_ended', 'subagent_ended', 'subagent_spawned']);
  assert.deepEqual(api.tools.map((t) => t.tool.name), [TOOL_NAME]);
  assert.equal(api.services.length, 1);
});

test('mirror: each OpenClaw event becomes the service event of the same meaning; nothing is injected', async () => {
  const svc = await startService();
  try {
    const api = await setup(svc);
    await api.fire('subagent_spawned', { runId: 'r1', childSessionKey: child, agentId: 'main', mode: 'run' }, { runId: 'r1', childSessionKey: child, requesterSessionKey: parent });
    // The spawn turn itself (the parent's task) is not a person's message, nor is the
    // child's first turn before subagent_spawned arrives, nor another session's input.
    assert.equal(await prompt(api, child, 'r1', []), undefined);
    await api.fire('before_prompt_build', { prompt: 'x', messages: [{}] }, agentCtx(child, 'r-agent', { inputProvenance: { kind: 'inter_session', sourceSessionKey: parent } }));
    await api.fire('before_prompt_build', { prompt: 'x', messages: [{}] }, agentCtx(child, 'r-hb', { trigger: 'heartbeat' }));
    await api.fire('subagent_ended', { targetSessionKey: child, targetKind: 'subagent', reason: 'complete', runId: 'r1', outcome: 'ok' }, { runId: 'r1', requesterSessionKey: parent });
    // A person's turn into the child: human_direct_message, the parent notified; built
    // twice (a retry) it is one event.
    assert.equal(await prompt(api, child, 'r2'), undefined, 'mirror mode injects nothing');
    assert.equal(await prompt(api, child, 'r2'), undefined);
    for (const [runId, outcome] of [['r3', 'error'], ['r4', 'timeout'], ['r5', 'killed'], ['r6', 'reset'], ['r7', 'deleted'], ['r8', undefined]]) {
      await api.fire('subagent_ended', { targetSessionKey: child, targetKind: 'subagent', reason: 'x', runId, outcome }, { runId });
    }
    await api.fire('after_compaction', { messageCount: 2, compactedCount: 2 }, agentCtx(child, undefined));
    await api.fire('after_tool_call', { toolName: 'create_goal', params: { objective: 'x' }, toolCallId: 't1' }, { toolName: 'create_goal', sessionKey: child, agentId: 'main', toolCallId: 't1' });
    await api.fire('after_tool_call', { toolName: 'update_goal', params: { status: 'complete' }, toolCallId: 't2', error: 'refused' }, { toolName: 'update_goal', sessionKey: child, toolCallId: 't2' });
    await api.fire('after_tool_call', { toolName: 'exec', params: {}, toolCallId: 't3' }, { toolName: 'exec', sessionKey: child, toolCallId: 't3' });
    await api.fire('after_tool_call', { toolName: 'update_goal', params: { status: 'complete' }, toolCallId: 't4' }, { toolName: 'update_goal', sessionKey: child, toolCallId: 't4' });
    const want = [
      { kind: 'child_spawned', actorType: 'agent', actorId: parent, summary: 'child session spawned', runId: 'r1', payload: null },
      { kind: 'run_completed', actorType: 'system', actorId: null, summary: 'child run completed', runId: 'r1', payload: null },
      { kind: 'human_direct_message', actorType: 'human', actorId: null, summary: 'human message via unknown', runId: 'r2', payload: { channel: 'unknown' } },
      { kind: 'run_failed', actorType: 'system', actorId: null, summary: 'child run failed', runId: 'r3', payload: { outcome: 'error' } },
      { kind: 'run_failed', actorType: 'system', actorId: null, summary: 'child run timed out', runId: 'r4', payload: { outcome: 'timeout' } },
      { kind: 'run_failed', actorType: 'system', actorId: null, summary: 'child run cancelled', runId: 'r5', payload: { outcome: 'cancelled' } },
      { kind: 'compacted', actorType: 'system', actorId: null, summary: 'session compacted', runId: null, payload: null },
      { kind: 'goal_changed', actorType: 'agent', actorId: child, summary: 'goal created', runId: null, payload: null },
      { kind: 'goal_changed', actorType: 'agent', actorId: child, summary: 'goal updated', runId: null, payload: null },
    ];
    let got;
    await waitFor('the events in the service', async () => (got = (await svc.log(child)).map(({ sequence, ...e }) => e)).length >= want.length);
    assert.deepEqual(got, want);
    // The parent's cursor is seeded at the spawn and notified once (NTC-2); mirror
    // mode leaves the notice pending for whoever injects it.
    assert.deepEqual((await svc.pending(parent)).map((n) => n.text), [noticeText(child, 1)]);
    assert.equal(await prompt(api, parent, 'p1'), undefined);
    assert.equal((await svc.pending(parent)).length, 1);
    // before_reset: the service's resetSession drops the cursors the session holds.
    await api.fire('before_reset', { reason: 'reset' }, agentCtx(parent, undefined));
    await settled();
    assert.deepEqual(await svc.pending(parent), []);
    assert.equal(api.logs.filter((l) => l.startsWith('warn')).length, 0, api.logs.join('\n'));
  } finally {
    await svc.stop();
  }
});

test('mirror: a child\'s run end is recorded from its agent_end, once, when subagent_ended does not come', async () => {
  const svc = await startService();
  const grace = Bridge.runEndGraceMs;
  Bridge.runEndGraceMs = 300;
  try {
    const api = await setup(svc);
    await api.fire('subagent_spawned', { runId: 'a1', childSessionKey: child, agentId: 'main', mode: 'run' }, { runId: 'a1', requesterSessionKey: parent });
    // The spawn run answers: run_completed at its end; its late subagent_ended is the same event.
    await api.fire('model_call_ended', { runId: 'a1', callId: 'c', outcome: 'completed' }, {});
    await end(api, child, 'a1');
    await api.fire('subagent_ended', { targetSessionKey: child, targetKind: 'subagent', reason: 'complete', runId: 'a1', outcome: 'ok' }, { runId: 'a1' });
    // A run whose only model call failed, with a subagent_ended that says timeout: that outcome.
    await api.fire('model_call_ended', { runId: 'a2', callId: 'c', outcome: 'error' }, {});
    await end(api, child, 'a2', true);
    await api.fire('subagent_ended', { targetSessionKey: child, targetKind: 'subagent', reason: 'x', runId: 'a2', outcome: 'timeout' }, { runId: 'a2' });
    // A failed run without subagent_ended: an error, after the grace.
    await end(api, child, 'a3', false);
    // The parent's own turns are no child runs.
    await end(api, parent, 'p1');
    const want = [['child_spawned', 'a1', null], ['run_completed', 'a1', null], ['run_failed', 'a2', { outcome: 'timeout' }], ['run_failed', 'a3', { outcome: 'error' }]];
    let got;
    await waitFor('four events', async () => (got = (await svc.log(child)).map((e) => [e.kind, e.runId, e.payload])).length >= 4);
    await sleep(500);
    assert.deepEqual((await svc.log(child)).map((e) => [e.kind, e.runId, e.payload]), want);
    assert.deepEqual(await svc.log(parent), []);
  } finally {
    Bridge.runEndGraceMs = grace;
    await svc.stop();
  }
});

test('mirror: a person\'s turn in a session OpenClaw spawned before a restart names its parent from the session store', async () => {
  const svc = await startService();
  try {
    await svc.spawn(child, parent);
    const api = await setup(svc, {}, { sessions: { [child]: { spawnedBy: parent } } });
    await prompt(api, child, 'r9');
    await waitFor('the notice', async () => (await svc.pending(parent)).length === 1);
    const [ev] = (await svc.log(child)).filter((e) => e.kind === 'human_direct_message');
    assert.equal(ev.runId, 'r9');
  } finally {
    await svc.stop();
  }
});

test('inject: a notice goes into the next prompt once, is acknowledged after the turn, and not shown again', async () => {
  const svc = await startService();
  try {
    await svc.spawn(child, parent);
    const api = await setup(svc, { mode: 'inject', wake: false });
    await svc.human(child);
    const r = await prompt(api, parent, 'p1');
    assert.equal(r.prependContext, `${HEADER}\n${noticeText(child, 1)}`);
    // The same run builds its prompt again (a retry): the same notices.
    assert.deepEqual(await prompt(api, parent, 'p1'), r);
    assert.equal((await svc.pending(parent)).length, 1, 'still pending while the turn runs');
    await api.fire('model_call_ended', { runId: 'p1', callId: 'c1', outcome: 'completed' }, {});
    await end(api, parent, 'p1');
    assert.deepEqual(await svc.pending(parent), []);
    assert.equal(await prompt(api, parent, 'p2'), undefined);
    await end(api, parent, 'p2');
  } finally {
    await svc.stop();
  }
});

test('inject: a failed turn releases its notices and the next turn shows them again, once', async () => {
  const svc = await startService();
  try {
    await svc.spawn(child, parent);
    const api = await setup(svc, { mode: 'inject', wake: false });
    await svc.human(child);
    const text = noticeText(child, 1);
    assert.match((await prompt(api, parent, 'f1')).prependContext, new RegExp(text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')));
    await end(api, parent, 'f1', false);
    assert.equal((await prompt(api, parent, 'f2')).prependContext, `${HEADER}\n${text}`);
    // OpenClaw 2026.9.6 ends a turn whose only model call was refused with success:
    // true; the refused call (model_call_ended) makes it a failure.
    await api.fire('model_call_ended', { runId: 'f2', callId: 'c', outcome: 'error' }, {});
    await end(api, parent, 'f2', true);
    assert.equal((await prompt(api, parent, 'f3')).prependContext, `${HEADER}\n${text}`);
    await api.fire('model_call_ended', { runId: 'f3', callId: 'c1', outcome: 'error' }, {});
    await api.fire('model_call_ended', { runId: 'f3', callId: 'c2', outcome: 'completed' }, {});
    await end(api, parent, 'f3', true);
    assert.deepEqual(await svc.pending(parent), []);
    // A turn whose end never came is settled as failed when the session's next turn starts.
    await svc.human(child);
    assert.ok((await prompt(api, parent, 'g1')).prependContext);
    assert.ok((await prompt(api, parent, 'g2')).prependContext, 'the lost turn\'s notice is shown by the next');
    // A run that reported no model call, where the runner reports them, showed nothing.
    await end(api, parent, 'g2', true);
    assert.equal((await svc.pending(parent)).length, 1);
    assert.ok((await prompt(api, parent, 'g3')).prependContext);
    await api.fire('model_call_ended', { runId: 'g3', callId: 'c', outcome: 'completed' }, {});
    await end(api, parent, 'g3');
    assert.deepEqual(await svc.pending(parent), []);
  } finally {
    await svc.stop();
  }
});

test('inject: a prompt whose hook OpenClaw no longer awaits drains nothing; the next prompt shows the notice', async () => {
  const svc = await startService();
  try {
    await svc.spawn(child, parent);
    const api = await setup(svc, { mode: 'inject', wake: false });
    await svc.human(child);
    const expired = { assertActive() { throw new Error('the hook timed out'); } };
    const r = await api.fire('before_prompt_build', { prompt: 'hi', messages: [{}] }, agentCtx(parent, 'x1', { hookInvocation: expired }));
    assert.deepEqual(r, [undefined]);
    await end(api, parent, 'x1');
    assert.equal((await svc.pending(parent)).length, 1, 'not acknowledged: the prompt never had it');
    assert.equal((await prompt(api, parent, 'x2')).prependContext, `${HEADER}\n${noticeText(child, 1)}`);
    await end(api, parent, 'x2');
    assert.deepEqual(await svc.pending(parent), []);
  } finally {
    await svc.stop();
  }
});

test('inject: notices beyond maxNoticeChars wait for the next turn with a digest line; agentIds name the service\'s sessions', async () => {
  const svc = await startService();
  try {
    const w = 'agent:alice:main';
    const kids = Array.from({ length: 5 }, (_, i) => `agent:alice:subagent:k${i}`);
    for (const k of kids) { await svc.spawn(k, w); await svc.human(k); }
    const api = await setup(svc, { mode: 'inject', wake: false, agentIds: { main: 'alice' }, maxNoticeChars: 600 });
    const first = (await prompt(api, parent, 'm1')).prependContext;
    const shown = first.split('\n').filter((l) => l.startsWith('Session "'));
    assert.ok(shown.length >= 1 && shown.length < 5, first);
    assert.match(first, new RegExp(`\\[awareness\\] ${5 - shown.length} more stale-session notices? (is|are) pending and will be shown next\\.$`));
    assert.ok(first.length <= 600, `${first.length} characters`);
    await end(api, parent, 'm1');
    let seen = shown.length;
    for (let i = 2; seen < 5 && i < 10; i++) {
      const p = (await prompt(api, parent, `m${i}`)).prependContext;
      seen += p.split('\n').filter((l) => l.startsWith('Session "')).length;
      await end(api, parent, `m${i}`);
    }
    assert.equal(seen, 5);
    assert.deepEqual(await svc.pending(w), []);
  } finally {
    await svc.stop();
  }
});

test('inject: a wake notice wakes the idle parent (system event + heartbeat), not a busy one', async () => {
  const svc = await startService();
  try {
    await svc.spawn(child, parent);
    const api = await setup(svc, { mode: 'inject' });
    await svc.human(child);
    await waitFor('a wake request', () => api.wakes.length === 1);
    assert.deepEqual(api.wakes[0], { source: 'session-state', intent: 'immediate', reason: `awareness:${child}`, agentId: 'main', sessionKey: parent });
    assert.equal(api.systemEvents[0].sessionKey, parent);
    assert.doesNotMatch(api.systemEvents[0].text, /changesSince/, 'the notice itself comes through the prompt, not the system event');
    // The woken turn takes the notice; while a turn runs nothing wakes.
    await prompt(api, parent, 'w1');
    await svc.spawn('agent:main:subagent:c2', parent);
    await svc.human('agent:main:subagent:c2');
    await sleep(2500);
    assert.equal(api.wakes.length, 1, 'no wake while the parent\'s turn runs');
    await end(api, parent, 'w1');
    await waitFor('the wake after the turn', () => api.wakes.length === 2);
  } finally {
    await svc.stop();
  }
});

test('awareness_status reads the service\'s log; CURSOR_AHEAD asks for a full refresh', async () => {
  const svc = await startService();
  try {
    await svc.spawn(child, parent);
    await svc.human(child);
    const api = await setup(svc, { mode: 'inject', wake: false });
    const tool = api.tools[0].tool;
    const r = await tool.execute('call1', { sessionKey: child, changesSince: 1 });
    assert.equal(r.details.stateVersion, 2);
    assert.deepEqual(r.details.stateChanges.events.map((e) => e.kind), ['human_direct_message']);
    assert.equal(r.details.fullRefresh, false);
    assert.match(r.content[0].text, /human message via webchat/);
    assert.equal((await tool.execute('call2', { sessionKey: child, changesSince: 9 })).details.fullRefresh, true);
    await assert.rejects(tool.execute('call3', {}), /sessionKey is required/);
    await assert.rejects(tool.execute('call4', { sessionKey: child, changesSince: -1 }), /changesSince must be a whole number/);
    await assert.rejects(tool.execute('call5', { sessionKey: 'agent:' }), /awareness_status: INVALID_ARGUMENT/);
  } finally {
    await svc.stop();
  }
});

test('one Bridge per process across registrations: one outbox, one connection', async () => {
  const svc = await startService();
  try {
    const stateDir = tempDir();
    const apis = ['discovery', 'full', 'full'].map((registrationMode) => {
      const api = fakeApi({ pluginConfig: { url: svc.url, mode: 'inject', wake: false }, registrationMode, stateDir });
      plugin.register(api);
      return api;
    });
    for (const api of apis) await api.start();
    // Every registration's hooks reach one state: an event through each is one Recorder's.
    for (const [i, api] of apis.entries()) {
      await api.fire('subagent_spawned', { runId: `s${i}`, childSessionKey: `agent:main:subagent:x${i}`, agentId: 'main', mode: 'run' }, { requesterSessionKey: parent });
    }
    await waitFor('three spawns', async () => (await svc.log('agent:main:subagent:x2')).length === 1);
    const warnings = apis.flatMap((a) => a.logs).filter((l) => l.startsWith('warn'));
    assert.deepEqual(warnings, [], 'no second outbox (it would be locked) and no second watcher');
    assert.equal(apis.flatMap((a) => a.logs).filter((l) => l.includes('through the outbox')).length, 1);
    // A notice drained through one registration is held for all: another's prompt does not show it again.
    await svc.human('agent:main:subagent:x0');
    assert.ok((await prompt(apis[1], parent, 'q1')).prependContext);
    assert.equal(await prompt(apis[2], 'agent:main:other', 'q2'), undefined);
    assert.deepEqual(await prompt(apis[2], parent, 'q1'), await prompt(apis[1], parent, 'q1'));
    await end(apis[2], parent, 'q1');
    assert.deepEqual(await svc.pending(parent), []);
  } finally {
    await svc.stop();
  }
});

test('a new config (OpenClaw registers the plugin again) gets a new Bridge on the same outbox, after the old one let go of it', async () => {
  const svc = await startService();
  try {
    const stateDir = tempDir();
    const a = fakeApi({ pluginConfig: { url: svc.url }, stateDir });
    plugin.register(a);
    await a.start();
    await a.fire('subagent_spawned', { runId: 'n1', childSessionKey: child, agentId: 'main', mode: 'run' }, { requesterSessionKey: parent });
    const b = fakeApi({ pluginConfig: { url: svc.url, mode: 'inject', wake: false }, stateDir });
    plugin.register(b);
    await b.start();
    await b.fire('subagent_ended', { targetSessionKey: child, targetKind: 'subagent', reason: 'x', runId: 'n1', outcome: 'ok' }, { runId: 'n1' });
    await waitFor('both events', async () => (await svc.log(child)).length === 2);
    assert.deepEqual([...a.logs, ...b.logs].filter((l) => l.startsWith('warn')), []);
    assert.equal(b.logs.filter((l) => l.includes('through the outbox')).length, 1);
  } finally {
    await svc.stop();
  }
});

test('the service down: prompts and recording go on within the bound; the spooled events arrive once it is back (SIG-7)', async () => {
  const first = await startService();
  await first.stop();
  const stateDir = tempDir();
  const api = fakeApi({ pluginConfig: { url: first.url, mode: 'inject', wake: false }, stateDir });
  plugin.register(api);
  await api.start();
  const t0 = Date.now();
  await api.fire('subagent_spawned', { runId: 'd1', childSessionKey: child, agentId: 'main', mode: 'run' }, { requesterSessionKey: parent });
  assert.equal(await prompt(api, parent, 'd1'), undefined);
  await end(api, parent, 'd1');
  assert.ok(Date.now() - t0 < 8000, `took ${Date.now() - t0} ms`);
  assert.match(readFileSync(join(stateDir, 'awareness', 'outbox'), 'utf8'), /child_spawned/, 'the event waits in the outbox');
  const svc = await startService(undefined, { dir: first.dir, port: first.port });
  try {
    await waitFor('the spooled spawn', async () => (await svc.log(child)).length === 1, 20000);
    assert.deepEqual((await svc.log(child)).map((e) => e.kind), ['child_spawned']);
  } finally {
    await svc.stop();
  }
});

test('a service that never answers: the observing hooks return at once, a prompt within its 3 s bound (SIG-7)', async () => {
  const sockets = new Set();
  const hang = createServer((sock) => { sockets.add(sock); sock.on('error', () => {}); });
  await new Promise((r) => hang.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${hang.address().port}/query`;
  try {
    const api = fakeApi({ pluginConfig: { url, mode: 'inject', wake: false }, stateDir: tempDir() });
    plugin.register(api);
    await api.start();
    const timed = async (f) => { const t = Date.now(); await f(); return Date.now() - t; };
    const observed = [
      await timed(() => api.fire('subagent_spawned', { runId: 'h1', childSessionKey: child, agentId: 'main', mode: 'run' }, { requesterSessionKey: parent })),
      await timed(() => api.fire('before_reset', {}, agentCtx(parent, undefined))),
      await timed(() => api.fire('agent_end', { runId: 'h2', success: true, messages: [] }, agentCtx(parent, 'h2'))),
    ];
    for (const ms of observed) assert.ok(ms < 500, `an observing hook took ${ms} ms`);
    const ms = await timed(() => prompt(api, parent, 'h3'));
    assert.ok(ms < 4500, `the prompt hook took ${ms} ms`);
  } finally {
    await closeBridge();
    for (const s of sockets) s.destroy();
    await new Promise((r) => hang.close(r));
  }
});
