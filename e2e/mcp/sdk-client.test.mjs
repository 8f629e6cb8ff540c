// The official MCP TypeScript SDK client against the service's /mcp (CLT-3):
// it lists the tools, calls each one, and compares its structuredContent with the
// GraphQL answer for the same arguments; it subscribes to a watcher's notices
// resource and expects notifications/resources/updated when a notice opens.
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

const NOTICE = 'watcher target targetAgentId changesSince notifiedVersion materialVersion text wake openedAt';

async function connect() {
  const client = new Client({ name: 'awareness-e2e', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { requestInit: { headers: auth } });
  await client.connect(transport);
  return client;
}

test('tools: structuredContent equals the GraphQL answer (CLT-3)', async () => {
  const client = await connect();
  try {
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(),
      ['ack_notices', 'pending_notices', 'session_status', 'session_unwatch', 'session_watch', 'sessions_list']);
    for (const t of tools) {
      assert.equal(t.inputSchema.type, 'object', t.name);
      assert.ok(t.description.length > 20, t.name);
    }
    const c1 = 'agent:main:subagent:mcp-c1';
    await data(`mutation { upsertSession(input: {sessionKey: "${c1}", displayName: "c1"}) { sessionKey } }`);
    await spawn(c1);
    await human(c1);
    await human(c1); // M moves past N: acknowledging opens a follow-up

    // session_status, with and without changesSince.
    for (const args of [{ sessionKey: c1, changesSince: 0 }, { sessionKey: c1 }, { sessionKey: c1, changesSince: 1, limit: 1 }]) {
      const r = await client.callTool({ name: 'session_status', arguments: args });
      assert.ok(!r.isError, JSON.stringify(r.content));
      const want = await data(`query($k: String!, $s: Int, $l: Int) { sessionStatus(sessionKey: $k, changesSince: $s, limit: $l) {
        sessionKey agentId stateVersion stateChanges { events { sequence kind actorType actorId summary occurredAt runId payload }
        historyGap truncated earliestAvailableSequence nextChangesSince } } }`, { k: args.sessionKey, s: args.changesSince, l: args.limit });
      assert.deepEqual(r.structuredContent, want.sessionStatus);
      assert.match(r.content[0].text, /state version 3/);
      if (args.changesSince !== undefined) assert.match(r.content[0].text, /Session state changes: /);
    }
    // The same error as GraphQL: CURSOR_AHEAD.
    const ahead = await client.callTool({ name: 'session_status', arguments: { sessionKey: c1, changesSince: 99 } });
    assert.equal(ahead.isError, true);
    const aheadGQL = await gql(`{ sessionStatus(sessionKey: "${c1}", changesSince: 99) { stateVersion } }`);
    assert.equal(ahead.content[0].text, `${aheadGQL.errors[0].extensions.code}: ${aheadGQL.errors[0].message}`);

    // sessions_list.
    const list = await client.callTool({ name: 'sessions_list', arguments: { keyPrefix: 'agent:main:subagent:mcp', first: 10 } });
    const wantList = await data(`query($f: SessionFilter, $n: Int) { sessionsList(filter: $f, first: $n) {
      sessions { sessionKey agentId kind sessionId parentSessionKey chatType provider displayName updatedAt stateVersion compactionCount }
      pageInfo { hasNextPage endCursor } } }`, { f: { keyPrefix: 'agent:main:subagent:mcp' }, n: 10 });
    assert.deepEqual(list.structuredContent, wantList.sessionsList);
    assert.equal(list.structuredContent.sessions.length, 1);

    // pending_notices.
    const pending = await client.callTool({ name: 'pending_notices', arguments: { watcher: W } });
    const wantPending = await data(`query($w: String!) { pendingNotices(watcher: $w) { ${NOTICE} } }`, { w: W });
    assert.deepEqual(pending.structuredContent, wantPending);
    assert.equal(wantPending.pendingNotices.length, 1);
    assert.match(pending.content[0].text, /Reconcile before acting/);

    // ack_notices: exactly the drained notice; the follow-up is what pendingNotices shows next.
    const n = wantPending.pendingNotices[0];
    const ack = await client.callTool({ name: 'ack_notices', arguments: {
      watcher: W, notices: [{ target: n.target, targetAgentId: n.targetAgentId, notifiedVersion: n.notifiedVersion }] } });
    assert.ok(!ack.isError, JSON.stringify(ack.content));
    const after = await data(`query($w: String!) { pendingNotices(watcher: $w) { ${NOTICE} } }`, { w: W });
    assert.deepEqual(ack.structuredContent, { ackNotices: after.pendingNotices });
    assert.equal(after.pendingNotices.length, 1);
    assert.equal(after.pendingNotices[0].changesSince, n.notifiedVersion);

    // session_watch, compared with the watches query of the same pair.
    const c2 = 'agent:main:subagent:mcp-c2';
    await human(c2);
    const watch = await client.callTool({ name: 'session_watch', arguments: { watcher: W, target: c2 } });
    const cursors = await data(`query($w: String, $t: String) { watches(watcher: $w, target: $t) {
      watcher target targetAgentId lastAcked notified material pending updatedAt } }`, { w: W, t: c2 });
    assert.deepEqual(watch.structuredContent, { watched: true, reason: null, cursor: cursors.watches[0] });
    // A refused watch reads the same as GraphQL's.
    const self = await client.callTool({ name: 'session_watch', arguments: { watcher: c2, target: c2 } });
    const selfGQL = await data(`mutation { watch(input: {watcher: "${c2}", target: "${c2}"}) { watched reason
      cursor { watcher target targetAgentId lastAcked notified material pending updatedAt } } }`);
    assert.deepEqual(self.structuredContent, selfGQL.watch);

    // session_unwatch: the first removal is true, the next false, as in GraphQL.
    const un = await client.callTool({ name: 'session_unwatch', arguments: { watcher: W, target: c2 } });
    assert.deepEqual(un.structuredContent, { unwatch: true });
    assert.deepEqual(await data(`mutation { unwatch(watcher: "${W}", target: "${c2}") }`), { unwatch: false });
    const un2 = await client.callTool({ name: 'session_unwatch', arguments: { watcher: W, target: c2 } });
    assert.deepEqual(un2.structuredContent, { unwatch: false });

    // A malformed input is refused by the input schema or by the service, never a crash.
    const bad = await client.callTool({ name: 'session_status', arguments: { sessionKey: 'agent:main:', changesSince: 0 } });
    assert.equal(bad.isError, true);
    assert.match(bad.content[0].text, /^INVALID_ARGUMENT: /);
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
