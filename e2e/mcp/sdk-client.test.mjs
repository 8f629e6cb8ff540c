// The official MCP TypeScript SDK client against the service's /mcp (CLT-3):
// it lists the tools, calls every one, and compares its structuredContent with the
// GraphQL answer for the same arguments (plus summary, the agent text, and
// watcherNotices, the named watcher's pending notices); Client.callTool checks every
// result against the tool's outputSchema (and throws when it does not match). It
// subscribes to a watcher's notices resource and expects
// notifications/resources/updated when a notice opens.
//
//   AWARENESS_URL=http://127.0.0.1:PORT [AWARENESS_TOKEN=…] node --test sdk-client.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const base = process.env.AWARENESS_URL;
const token = process.env.AWARENESS_TOKEN;
const auth = token ? { Authorization: `Bearer ${token}` } : {};
const W = 'agent:main:main';

async function gql(query, variables) {
  const res = await fetch(`${base}/query`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', ...auth },
    body: JSON.stringify({ query, variables }),
  });
  const body = await res.json();
  return body;
}
async function data(query, variables) {
  const body = await gql(query, variables);
  assert.equal(body.errors, undefined, JSON.stringify(body.errors));
  return body.data;
}
const record = (input) => data(`mutation($in: RecordEventInput!) { recordEvent(input: $in) { stateVersion } }`, { in: input });
const spawn = (child) => record({ sessionKey: child, kind: 'child_spawned', actorType: 'agent', actorId: W, watchers: [W] });
const human = (key) => record({ sessionKey: key, kind: 'human_direct_message', actorType: 'human', actorId: 'user:alice', channel: 'webchat' });

const NOTICE = 'watcher target targetAgentId changesSince notifiedVersion materialVersion text wake openedAt targetGeneration watcherGeneration';

// gqlPart is a tool's structuredContent without what MCP adds to the GraphQL answer.
function gqlPart(sc) {
  const { summary, watcherNotices, ...rest } = sc;
  assert.equal(typeof summary, 'string');
  assert.ok(summary.length > 0);
  return rest;
}

async function connect() {
  const client = new Client({ name: 'awareness-e2e', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { requestInit: { headers: auth } });
  await client.connect(transport);
  return client;
}

test('tools: structuredContent equals the GraphQL answer (CLT-3)', async () => {
  const client = await connect();
  try {
    const { tools } = await client.listTools(); // caches each tool's outputSchema validator
    const names = tools.map((t) => t.name).sort();
    assert.deepEqual(names, ['ack_notices', 'pending_notices', 'record_event', 'session_status', 'session_unwatch',
      'session_watch', 'sessions_list', 'wait_for_notices']);
    for (const t of tools) {
      assert.equal(t.inputSchema.type, 'object', t.name);
      assert.equal(t.outputSchema?.type, 'object', `${t.name} has no output schema`);
      assert.match(t.description, /^Call this /, t.name);
      for (const hint of ['readOnlyHint', 'idempotentHint', 'destructiveHint', 'openWorldHint']) {
        assert.equal(typeof t.annotations?.[hint], 'boolean', `${t.name}: ${hint}`);
      }
    }
    const called = new Set();
    const callTool = async (p) => { called.add(p.name); return client.callTool(p); };
    const c1 = 'agent:main:subagent:mcp-c1';
    await data(`mutation { upsertSession(input: {sessionKey: "${c1}", displayName: "c1"}) { sessionKey } }`);
    await spawn(c1);
    await human(c1);
    await human(c1); // M moves past N: acknowledging opens a follow-up

    // session_status, with and without changesSince.
    for (const args of [{ sessionKey: c1, changesSince: 0 }, { sessionKey: c1 }, { sessionKey: c1, changesSince: 1, limit: 1 }]) {
      const r = await callTool({ name: 'session_status', arguments: args });
      assert.ok(!r.isError, JSON.stringify(r.content));
      const want = await data(`query($k: String!, $s: Int, $l: Int) { sessionStatus(sessionKey: $k, changesSince: $s, limit: $l) {
        sessionKey agentId stateVersion stateChanges { events { sequence kind actorType actorId summary occurredAt runId payload }
        historyGap truncated earliestAvailableSequence nextChangesSince } } }`, { k: args.sessionKey, s: args.changesSince, l: args.limit });
      assert.deepEqual(gqlPart(r.structuredContent), want.sessionStatus);
      assert.match(r.content[0].text, /state version 3/);
      assert.match(r.structuredContent.summary, /state version 3/);
      if (args.changesSince !== undefined) assert.match(r.content[0].text, /Session state changes: /);
    }
    // The same error as GraphQL: CURSOR_AHEAD.
    const ahead = await callTool({ name: 'session_status', arguments: { sessionKey: c1, changesSince: 99 } });
    assert.equal(ahead.isError, true);
    const aheadGQL = await gql(`{ sessionStatus(sessionKey: "${c1}", changesSince: 99) { stateVersion } }`);
    assert.equal(ahead.content[0].text, `${aheadGQL.errors[0].extensions.code}: ${aheadGQL.errors[0].message}`);

    // sessions_list.
    const list = await callTool({ name: 'sessions_list', arguments: { keyPrefix: 'agent:main:subagent:mcp', first: 10 } });
    const wantList = await data(`query($f: SessionFilter, $n: Int) { sessionsList(filter: $f, first: $n) {
      sessions { sessionKey agentId kind sessionId parentSessionKey chatType provider displayName updatedAt stateVersion compactionCount }
      pageInfo { hasNextPage endCursor } } }`, { f: { keyPrefix: 'agent:main:subagent:mcp' }, n: 10 });
    assert.deepEqual(gqlPart(list.structuredContent), wantList.sessionsList);
    assert.equal(list.structuredContent.sessions.length, 1);

    // pending_notices.
    const pending = await callTool({ name: 'pending_notices', arguments: { watcher: W } });
    const wantPending = await data(`query($w: String!) { pendingNotices(watcher: $w) { ${NOTICE} } }`, { w: W });
    assert.deepEqual(gqlPart(pending.structuredContent), wantPending);
    assert.equal(wantPending.pendingNotices.length, 1);
    assert.match(pending.content[0].text, /Reconcile before acting/);
    assert.match(pending.structuredContent.summary, /Reconcile before acting/);
    // Any call naming a watcher carries its pending notices (the digest).
    const st = await callTool({ name: 'session_status', arguments: { sessionKey: c1, watcher: W } });
    assert.deepEqual(st.structuredContent.watcherNotices, { watcher: W, pending: 1, notices: wantPending.pendingNotices.map(
      (n) => ({ target: n.target, targetAgentId: n.targetAgentId, notifiedVersion: n.notifiedVersion, text: n.text })) });
    // wait_for_notices answers at once while one is pending.
    const waited = await callTool({ name: 'wait_for_notices', arguments: { watcher: W, timeoutMs: 30000 } });
    assert.deepEqual(waited.structuredContent.pendingNotices, wantPending.pendingNotices);
    assert.equal(waited.structuredContent.timedOut, false);

    // ack_notices: exactly the drained notice, answered per notice as acknowledgeNotices;
    // the follow-up is what pendingNotices shows next.
    const n = wantPending.pendingNotices[0];
    const ack = await callTool({ name: 'ack_notices', arguments: {
      watcher: W, notices: [{ target: n.target, targetAgentId: n.targetAgentId, notifiedVersion: n.notifiedVersion }] } });
    assert.ok(!ack.isError, JSON.stringify(ack.content));
    const after = await data(`query($w: String!) { pendingNotices(watcher: $w) { ${NOTICE} } }`, { w: W });
    assert.deepEqual(gqlPart(ack.structuredContent), { acknowledgeNotices: [{ watcher: W, target: n.target, targetAgentId: n.targetAgentId,
      notifiedVersion: n.notifiedVersion, outcome: 'acknowledged', followUp: after.pendingNotices[0], pending: null }] });
    assert.equal(after.pendingNotices.length, 1);
    assert.equal(after.pendingNotices[0].changesSince, n.notifiedVersion);
    // The same acknowledgement again changes nothing, and says so, as GraphQL does.
    const again = await callTool({ name: 'ack_notices', arguments: {
      watcher: W, notices: [{ target: n.target, targetAgentId: n.targetAgentId, notifiedVersion: n.notifiedVersion }] } });
    const againGQL = await data(`mutation($w: String!, $n: [NoticeRef!]!) { acknowledgeNotices(watcher: $w, notices: $n) {
      watcher target targetAgentId notifiedVersion outcome followUp { ${NOTICE} } pending { ${NOTICE} } } }`,
    { w: W, n: [{ target: n.target, targetAgentId: n.targetAgentId, notifiedVersion: n.notifiedVersion }] });
    assert.deepEqual(gqlPart(again.structuredContent), againGQL);
    assert.equal(againGQL.acknowledgeNotices[0].outcome, 'alreadyAcknowledged');

    // session_watch, compared with the watches query of the same pair.
    const c2 = 'agent:main:subagent:mcp-c2';
    await human(c2);
    const watch = await callTool({ name: 'session_watch', arguments: { watcher: W, target: c2 } });
    const cursors = await data(`query($w: String, $t: String) { watches(watcher: $w, target: $t) {
      watcher target targetAgentId lastAcked notified material pending updatedAt } }`, { w: W, t: c2 });
    assert.deepEqual(gqlPart(watch.structuredContent), { watched: true, reason: null, cursor: cursors.watches[0] });
    // A refused watch reads the same as GraphQL's.
    const self = await callTool({ name: 'session_watch', arguments: { watcher: c2, target: c2 } });
    const selfGQL = await data(`mutation { watch(input: {watcher: "${c2}", target: "${c2}"}) { watched reason
      cursor { watcher target targetAgentId lastAcked notified material pending updatedAt } } }`);
    assert.deepEqual(gqlPart(self.structuredContent), selfGQL.watch);

    // session_unwatch: the first removal is true, the next false, as in GraphQL.
    const un = await callTool({ name: 'session_unwatch', arguments: { watcher: W, target: c2 } });
    assert.deepEqual(gqlPart(un.structuredContent), { unwatch: true });
    assert.deepEqual(await data(`mutation { unwatch(watcher: "${W}", target: "${c2}") }`), { unwatch: false });
    const un2 = await callTool({ name: 'session_unwatch', arguments: { watcher: W, target: c2 } });
    assert.deepEqual(gqlPart(un2.structuredContent), { unwatch: false });

    // record_event: what recordEvent answers for the same input (a dedupeKey makes the
    // GraphQL call the same event again).
    const input = { sessionKey: 'agent:main:subagent:mcp-c4', kind: 'run_failed', actorType: 'system', outcome: 'timeout', dedupeKey: 'mcp-rec-1' };
    const rec = await callTool({ name: 'record_event', arguments: input });
    assert.ok(!rec.isError, JSON.stringify(rec.content));
    const recGQL = await data(`mutation($in: RecordEventInput!) { recordEvent(input: $in) { recorded
      event { sequence kind actorType actorId summary occurredAt runId payload } stateVersion noticesOpened skippedWatchers { watcher reason } } }`, { in: input });
    assert.deepEqual(gqlPart(rec.structuredContent), { ...recGQL.recordEvent, recorded: true });
    assert.equal(recGQL.recordEvent.recorded, false);

    // A malformed input is refused by the input schema or by the service, never a crash.
    const bad = await callTool({ name: 'session_status', arguments: { sessionKey: 'agent:main:', changesSince: 0 } });
    assert.equal(bad.isError, true);
    assert.match(bad.content[0].text, /^INVALID_ARGUMENT: /);
    const typed = await callTool({ name: 'session_status', arguments: { sessionKey: c1, changesSince: 'zero' } });
    assert.equal(typed.isError, true);
    assert.equal(typed.content[0].text, 'INVALID_ARGUMENT: changesSince must be a whole number, not a JSON string');

    assert.deepEqual([...called].sort(), names, 'every tool was called, its result checked against its outputSchema');
  } finally {
    await client.close();
  }
});

test('resource: notifications/resources/updated when a notice opens (CLT-3)', async () => {
  const client = await connect();
  try {
    const uri = `awareness://notices/${encodeURIComponent(W).replace(/%3A/g, ':')}`;
    const { resourceTemplates } = await client.listResourceTemplates();
    assert.deepEqual(resourceTemplates.map((t) => t.uriTemplate), ['awareness://notices/{+watcher}']);
    const updates = [];
    let wake;
    client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => { updates.push(n.params.uri); if (wake) wake(); });
    await client.subscribeResource({ uri });
    const c3 = 'agent:main:subagent:mcp-c3';
    await spawn(c3);
    await new Promise((r) => setTimeout(r, 500)); // the feed's stream is up and has replayed
    updates.length = 0;
    await human(c3);
    await new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`no resources/updated within 10 s (got ${JSON.stringify(updates)})`)), 10000);
      wake = () => { clearTimeout(t); resolve(); };
      if (updates.length) wake();
    });
    assert.equal(updates[0], uri);
    const read = await client.readResource({ uri });
    const body = JSON.parse(read.contents[0].text);
    const want = await data(`query($w: String!) { pendingNotices(watcher: $w) { ${NOTICE} } }`, { w: W });
    assert.deepEqual(body, want);
    const n3 = body.pendingNotices.find((n) => n.target === c3);
    assert.ok(n3);
    // Closing the notice (an exact acknowledgement from any client) is an update too.
    const before = updates.length;
    await data(`mutation($w: String!, $n: [NoticeRef!]) { ackNotices(watcher: $w, notices: $n) { target } }`,
      { w: W, n: [{ target: c3, notifiedVersion: n3.notifiedVersion }] });
    await new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('no resources/updated within 10 s of the notice closing')), 10000);
      wake = () => { if (updates.length > before) { clearTimeout(t); resolve(); } };
      wake();
    });
    await client.unsubscribeResource({ uri });
  } finally {
    await client.close();
  }
});
