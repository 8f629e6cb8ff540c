// The Watcher against the real binary, on SQLite and PostgreSQL: restarts of the
// service between drain and ack, release, an ack while the service is down, SSE behind
// a proxy that refuses upgrades, watchers added and removed on one connection,
// refused credentials, close (NTC-3, NTC-5, NTC-7, CLT-5).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { createServer } from 'node:net';
import { Client, Codes, Recorder, Watcher, AckPendingError, WatcherError, reconcile } from '../dist/index.js';
import { backends, tempDir, freePort, startServer, sleep, waitFor, once, proxy, authFile, unhandled } from './helpers.mjs';

const W = 'agent:main:main';
const fast = { minBackoffMs: 20, maxBackoffMs: 200 };

/** Counts every notice handed out, by (watcher, target, notifiedVersion). */
class Handouts {
  seen = new Map();
  twice = 0;
  total = 0;
  take(notices) {
    for (const n of notices) {
      const k = `${n.watcher} ${n.target} ${n.notifiedVersion}`;
      const c = (this.seen.get(k) ?? 0) + 1;
      this.seen.set(k, c);
      this.total++;
      if (c > 1) this.twice++;
    }
    return notices;
  }
}

async function drainWait(w, n, ...watchers) {
  const got = [];
  await waitFor(`${n} notices to drain`, () => { got.push(...w.drain(...watchers)); return got.length >= n; });
  assert.equal(got.length, n, JSON.stringify(got));
  return got;
}

for (const b of backends()) {
  for (const [transport, rounds] of [['auto', 20], ['sse', 20]]) {
    test(`Watcher: the service killed (-9) or stopped (SIGTERM) between drain and ack, ${rounds} rounds over ${transport}: each notice handed out once, the exact ack acknowledges it (NTC-3, NTC-5, CLT-5) [${b.name}]`, async (t) => {
      const dir = tempDir(), db = await b.database(dir), port = await freePort();
      let s = await startServer(db.url, port);
      const children = ['agent:main:subagent:r0', 'agent:main:subagent:r1', 'agent:main:subagent:r2'];
      for (const c of children) await s.spawn(c, W);
      const w = new Watcher(new Client(s.endpoint), [W], { ...fast, transport });
      const handed = new Handouts();
      let acknowledged = 0;
      try {
        await w.waitConnected();
        for (let r = 0; r < rounds; r++) {
          const child = children[r % children.length];
          await s.human(child);
          await waitFor(`round ${r}: the notice on ${child}`, () => w.pending(W).some((n) => n.target === child));
          const drained = handed.take(w.drain(W));
          await s.human(child); // M moves past N: the ack opens a follow-up
          const dups = w.duplicates;
          s = await s.restart(r % 2 ? 'SIGTERM' : 'SIGKILL');
          await waitFor(`round ${r}: the replay of the held notices`, () => w.duplicates >= dups + drained.length);
          const acks = await w.ack(drained);
          for (const a of acks) {
            assert.equal(a.outcome, 'acknowledged', `round ${r}: ${JSON.stringify(a)}`);
            acknowledged++;
          }
          const fu = acks.find((a) => a.target === child).followUp;
          assert.ok(fu, `round ${r}: no follow-up`);
          assert.equal(fu.changesSince, drained.find((n) => n.target === child).notifiedVersion);
          assert.deepEqual(w.drained(), [], 'acknowledged notices are still held');
        }
        await sleep(300);
        const rest = handed.take(w.drain(W));
        for (const a of await w.ack(rest)) assert.equal(a.outcome, 'acknowledged');
        await sleep(300);
        assert.deepEqual(w.drain(), [], 'handed out again after its ack');
        assert.deepEqual(await s.pending(W), []);
        t.diagnostic(`${rounds} restarts over ${transport} on ${b.name}: ${handed.total} notices handed out, ${acknowledged} acknowledged after a restart, ${handed.twice} handed out twice`);
        assert.equal(handed.twice, 0, `${handed.twice} notices handed out twice`);
      } finally {
        await w.close();
        await s.kill();
        await db.drop();
      }
    });
  }

  test(`Watcher: a turn that fails after drain releases its notices, and they are drained again across a reconnect and restarts of either side (CLT-5) [${b.name}]`, async () => {
    const dir = tempDir(), db = await b.database(dir), port = await freePort();
    let s = await startServer(db.url, port);
    const child = 'agent:main:subagent:rel';
    await s.spawn(child, W);
    const client = new Client(s.endpoint);
    let w = new Watcher(client, [W], fast);
    try {
      await s.human(child);
      const [first] = await drainWait(w, 1, W);
      assert.deepEqual(w.drained(W), [first]);
      assert.equal(w.release([first]), 1); // the turn failed before it used the notice
      const [again] = await drainWait(w, 1, W);
      assert.deepEqual(again, first);
      // Held across a restart of the service: the replay is dropped, release hands it back.
      const dups = w.duplicates;
      s = await s.restart('SIGKILL');
      await waitFor('the replay', () => w.duplicates > dups);
      assert.deepEqual(w.drain(W), [], 'a held notice was handed out again by a replay');
      assert.equal(w.release([again]), 1);
      const [third] = await drainWait(w, 1, W);
      assert.equal(third.text, first.text);
      // The gateway process ends with the notice held: a new Watcher gets it again.
      await w.close();
      w = new Watcher(client, [W], fast);
      const [fourth] = await drainWait(w, 1, W);
      assert.equal(fourth.notifiedVersion, first.notifiedVersion);
      assert.equal(fourth.text, first.text);
      const [a] = await w.ack([fourth]);
      assert.equal(a.outcome, 'acknowledged');
      assert.equal(w.release([fourth]), 0, 'an acknowledged notice was handed back');
      assert.deepEqual(await s.pending(W), []);
    } finally {
      await w.close();
      await s.kill();
      await db.drop();
    }
  });

  test(`Watcher: an ack while the service is down is acknowledged once when it is back (NTC-3, CLT-5) [${b.name}]`, async () => {
    const dir = tempDir(), db = await b.database(dir), port = await freePort();
    let s = await startServer(db.url, port);
    const child = 'agent:main:subagent:down';
    await s.spawn(child, W);
    const w = new Watcher(new Client(s.endpoint, { timeoutMs: 1000 }), [W], fast);
    const background = [];
    w.on('ack', (acks) => background.push(...acks));
    const handed = new Handouts();
    try {
      await s.human(child);
      const drained = handed.take(await drainWait(w, 1, W));
      await s.kill();
      const err = await w.ack(drained).then(() => null, (e) => e);
      assert.ok(err instanceof AckPendingError, String(err));
      assert.deepEqual(err.notices, drained);
      assert.deepEqual(w.drained(W), drained, 'the notice is no longer held');
      s = await startServer(db.url, port);
      await waitFor('the acknowledgement sent again', () => background.length > 0);
      assert.equal(background.length, 1, JSON.stringify(background));
      assert.equal(background[0].outcome, 'acknowledged');
      assert.equal(background[0].notifiedVersion, drained[0].notifiedVersion);
      await waitFor('the stream back', () => w.connected);
      await sleep(300);
      assert.deepEqual(handed.take(w.drain(W)), [], 'the acknowledged notice was handed out again');
      assert.deepEqual(w.drained(W), []);
      assert.deepEqual(await s.pending(W), []);
      // Acknowledging it again answers alreadyAcknowledged and changes nothing.
      const [again] = await w.ack(drained);
      assert.equal(again.outcome, 'alreadyAcknowledged');
      assert.equal(handed.twice, 0);
    } finally {
      await w.close();
      await s.kill();
      await db.drop();
    }
  });

  test(`Watcher: ack answers what it did with each notice; it acknowledges only what was drained (NTC-3) [${b.name}]`, async () => {
    const dir = tempDir(), db = await b.database(dir);
    const s = await startServer(db.url, await freePort());
    const [c1, c2, c3] = ['agent:main:subagent:a1', 'agent:main:subagent:a2', 'agent:main:subagent:a3'];
    for (const k of [c1, c2, c3]) await s.spawn(k, W);
    const client = new Client(s.endpoint);
    const w = new Watcher(client, [W], fast);
    try {
      await w.waitConnected();
      await s.human(c3);
      await waitFor('the c3 notice', () => w.pending().length === 1);
      // Acknowledged elsewhere: its closed item drops it.
      const [elsewhere] = await client.acknowledgeNotices(W, w.pending());
      assert.equal(elsewhere.outcome, 'acknowledged');
      await waitFor('the closed c3 notice to be dropped', () => w.pending().length === 0);

      await s.human(c1);
      const drained = await drainWait(w, 1);
      const old = drained[0].notifiedVersion;
      await client.acknowledgeNotices(W, drained); // someone else acknowledges the drained one
      await s.human(c1);
      await s.human(c2);
      const later = await drainWait(w, 2);
      const [a] = await w.ack(drained);
      assert.equal(a.outcome, 'alreadyAcknowledged');
      assert.ok(a.pending && a.pending.notifiedVersion > old, JSON.stringify(a));
      const pending = await s.pending(W);
      assert.equal(pending.length, 2, JSON.stringify(pending));
      const acks = await w.ack(later);
      assert.deepEqual(acks.map((x) => x.outcome), ['acknowledged', 'acknowledged']);
      assert.deepEqual(await s.pending(W), []);
      // The typed calls: watch, pendingNotices, unwatch (its closed item drops the notice).
      const watched = await client.watch(W, 'agent:main:subagent:typed');
      assert.equal(watched.watched, true);
      assert.equal(watched.cursor.pending, false);
      await s.human('agent:main:subagent:typed');
      await waitFor('the typed notice', () => w.pending().length === 1);
      assert.equal((await client.pendingNotices(W)).length, 1);
      assert.equal(await client.unwatch(W, 'agent:main:subagent:typed'), true);
      await waitFor('the unwatched notice to be dropped', () => w.pending().length === 0);
    } finally {
      await w.close();
      await s.kill();
      await db.drop();
    }
  });

  test(`Watcher: behind a proxy that refuses upgrades, notices arrive over SSE within 2 s, and the WebSocket is taken again when upgrades pass (CLT-5) [${b.name}]`, async (t) => {
    const dir = tempDir(), db = await b.database(dir), port = await freePort();
    let s = await startServer(db.url, port);
    const p = await proxy(port, { refuse: true });
    const [c1, c2] = ['agent:main:subagent:p1', 'agent:main:subagent:p2'];
    for (const k of [c1, c2]) await s.spawn(k, W);
    await s.human(c1);
    const transports = [], errors = [];
    const t0 = performance.now();
    const w = new Watcher(new Client(p.endpoint), [W], { ...fast, upgradeRetryMs: 500 });
    w.on('transport', (x) => transports.push(x));
    w.on('error', (e) => errors.push(e));
    const handed = new Handouts();
    try {
      await waitFor('the pending notice over SSE', () => w.pending(W).length === 1, 2000);
      const fallback = performance.now() - t0;
      assert.equal(w.transport, 'sse');
      assert.deepEqual(transports, ['sse']);
      for (const a of await w.ack(handed.take(w.drain(W)))) assert.equal(a.outcome, 'acknowledged');

      const t1 = performance.now();
      await s.human(c2);
      await waitFor('a new notice over SSE', () => w.pending(W).length === 1, 2000);
      const live = performance.now() - t1;
      const held = handed.take(w.drain(W));
      // A restart while on SSE: the replay of the held notice is dropped.
      const dups = w.duplicates;
      s = await s.restart('SIGTERM');
      await waitFor('the replay over SSE', () => w.duplicates > dups);
      for (const a of await w.ack(held)) assert.equal(a.outcome, 'acknowledged');

      p.state.refuse = false;
      await waitFor('the WebSocket again', () => w.transport === 'websocket');
      assert.deepEqual(transports, ['sse', 'websocket']);
      await s.human(c1);
      await waitFor('a notice over the WebSocket', () => w.pending(W).length === 1);
      for (const a of await w.ack(handed.take(w.drain(W)))) assert.equal(a.outcome, 'acknowledged');
      await sleep(1500); // the SSE streams have closed
      assert.deepEqual(w.drain(W), []);
      // The WebSocket taken again reconnects like the first one.
      const upgrades = p.state.upgrades;
      p.cut();
      await waitFor('the WebSocket reconnected', () => p.state.upgrades > upgrades && w.connected);
      await s.human(c2);
      await waitFor('a notice after the reconnect', () => w.pending(W).length === 1);
      assert.equal(w.transport, 'websocket');
      for (const a of await w.ack(handed.take(w.drain(W)))) assert.equal(a.outcome, 'acknowledged');
      assert.equal(handed.twice, 0);
      assert.ok(errors.length === 0 || errors.every((e) => e instanceof WatcherError), errors.join('; '));
      t.diagnostic(`${b.name}: the first notice over SSE ${fallback.toFixed(0)} ms after the Watcher started; a live one ${live.toFixed(0)} ms after its event`);
    } finally {
      await w.close();
      await p.close();
      await s.kill();
      await db.drop();
    }
  });

  test(`Watcher: watchers added and removed on one connection; a watcher the token may not read is refused at once (CLT-1, CLT-5) [${b.name}]`, async () => {
    const dir = tempDir(), db = await b.database(dir), auth = authFile(dir, ['main', 'ops']), port = await freePort();
    const s = await startServer(db.url, port, ['--auth-file', auth.path], auth.admin);
    const p = await proxy(port, { refuse: false });
    const client = new Client(p.endpoint, { token: auth.agents.main });
    const W2 = 'agent:main:subagent:w2', [t1, t2] = ['agent:main:subagent:t1', 'agent:main:subagent:t2'];
    assert.equal((await client.watch(W, t1)).watched, true);
    assert.equal((await client.watch(W2, t2)).watched, true);
    const w = new Watcher(client, [], { ...fast, transport: 'websocket' });
    const noticed = [];
    w.on('notice', (watcher) => noticed.push(watcher));
    try {
      assert.equal(await w.addWatcher(W), W);
      assert.equal(await w.addWatcher('Agent:Main:Subagent:W2'), W2);
      assert.deepEqual(w.watchers, [W, W2].sort());
      await waitFor('both streams up', () => w.connected);
      await s.human(t1);
      await s.human(t2);
      await waitFor('a notice for each watcher', () => w.pending(W).length === 1 && w.pending(W2).length === 1);
      assert.deepEqual([...new Set(noticed)].sort(), [W, W2].sort());
      assert.equal(w.pending(W2)[0].wake, false);
      assert.equal(p.state.upgrades, 1, 'one connection per watcher');
      await w.ack(w.drain());

      w.removeWatcher(W2);
      await s.human(t2);
      await s.human(t1);
      await waitFor('the notice of the watcher still followed', () => w.pending(W).length === 1);
      await sleep(300);
      assert.deepEqual(w.pending(W2), [], 'a removed watcher still gets notices');
      assert.deepEqual(w.watchers, [W]);

      const refused = await w.addWatcher('agent:ops:main').then(() => null, (e) => e);
      assert.equal(refused?.code, 'FORBIDDEN', String(refused));
      assert.deepEqual(w.watchers, [W]);
      await assert.rejects(w.addWatcher('bare-key'), (e) => e.code === 'INVALID_ARGUMENT');
      assert.equal(p.state.upgrades, 1);
    } finally {
      await w.close();
      await p.close();
      await s.kill();
      await db.drop();
    }
  });

  test(`Watcher: refused credentials are a fatal error event and lastError, on the WebSocket and over SSE (CLT-1, CLT-5) [${b.name}]`, async () => {
    const dir = tempDir(), db = await b.database(dir), auth = authFile(dir);
    const s = await startServer(db.url, await freePort(), ['--auth-file', auth.path], auth.admin);
    const watchers = [];
    try {
      for (const transport of ['auto', 'websocket', 'sse']) {
        const w = new Watcher(new Client(s.endpoint, { token: 'x'.repeat(48) }), [W], { ...fast, transport });
        watchers.push(w);
        const [err] = await once(w, 'error');
        assert.ok(err instanceof WatcherError, String(err));
        assert.equal(err.fatal, true, `${transport}: ${err}`);
        assert.equal(err.code, 'UNAUTHENTICATED', `${transport}: ${err}`);
        assert.equal(err.watcher, W);
        assert.equal(w.lastError, err);
        await sleep(300);
        assert.equal(w.connected, false);
      }
    } finally {
      for (const w of watchers) await w.close();
      await s.kill();
      await db.drop();
    }
  });
}

test('Watcher: close never rejects: the service never up, killed, behind a refusing proxy, with an ack owed (CLT-5)', async () => {
  const dir = tempDir(), port = await freePort();
  const nobody = new Watcher(new Client(`http://127.0.0.1:${await freePort()}/query`), [W], fast);
  const errors = [];
  nobody.on('error', (e) => errors.push(e));
  await sleep(300);
  assert.ok(errors.length > 0 && nobody.lastError instanceof WatcherError, 'no error while nobody listens');
  assert.equal(errors[0].fatal, false);
  await nobody.close();
  await nobody.close();

  const s = await startServer(join(dir, 'db'), port);
  await s.spawn('agent:main:subagent:c', W);
  await s.human('agent:main:subagent:c');
  const w = new Watcher(new Client(s.endpoint, { timeoutMs: 500 }), [W], fast);
  const drained = await drainWait(w, 1, W);
  await s.kill();
  await assert.rejects(w.ack(drained), AckPendingError); // owed: close tries it once more
  await w.close();
  await assert.rejects(w.ack(drained), /closed/);

  const p = await proxy(await freePort(), { refuse: true });
  for (const transport of ['websocket', 'auto', 'sse']) {
    const pw = new Watcher(new Client(p.endpoint), [W], { ...fast, transport });
    await sleep(200);
    await pw.close();
  }
  await p.close();

  // A server that accepts the connection and never answers the upgrade: close while
  // the WebSocket is still connecting (the ws library reports that on the next tick).
  const sockets = new Set();
  const hang = createServer((sock) => { sockets.add(sock); sock.on('error', () => {}); });
  await new Promise((r) => hang.listen(0, '127.0.0.1', r));
  const hw = new Watcher(new Client(`http://127.0.0.1:${hang.address().port}/query`), [W], { ...fast, transport: 'websocket' });
  await waitFor('the connection', () => sockets.size > 0);
  await hw.close();
  await sleep(100);
  for (const sock of sockets) sock.destroy();
  await new Promise((r) => hang.close(r));

  const rec = await Recorder.open(new Client(s.endpoint), join(dir, 'outbox'));
  await rec.record({ sessionKey: 'agent:main:subagent:c', kind: 'compacted', actorType: 'system' });
  await rec.close();
  await sleep(100);
  assert.deepEqual(unhandled, [], 'unhandled rejections');
});

test('Watcher: reconcile reads the delta a notice names (REC-1)', async () => {
  const dir = tempDir(), s = await startServer(join(dir, 'db'), await freePort());
  const child = 'agent:main:subagent:rc';
  try {
    await s.spawn(child, W);
    for (let i = 0; i < 3; i++) await s.human(child);
    const w = new Watcher(new Client(s.endpoint), [W], fast);
    const [n] = await drainWait(w, 1, W);
    const r = await reconcile(new Client(s.endpoint), { sessionKey: n.target, agentId: n.targetAgentId }, n.changesSince);
    assert.equal(r.fullRefresh, false);
    assert.deepEqual(r.events.map((e) => e.kind), ['human_direct_message', 'human_direct_message', 'human_direct_message']);
    await w.ack([n]);
    await w.close();
  } finally {
    await s.kill();
  }
});

test('Client: digest, drain, release, snooze and dismiss against the real binary (DIG-1, RDL-1, RDL-2)', async () => {
  const dir = tempDir(), s = await startServer(join(dir, 'db'), await freePort());
  const child = 'agent:main:subagent:rdl';
  try {
    await s.spawn(child, W);
    await s.human(child);
    const c = new Client(s.endpoint);
    const [p] = await c.pendingDigests(W);
    assert.equal(p.digest.humanEvents, 1);
    assert.equal(p.digest.latestVersion, p.notifiedVersion);
    assert.equal(p.digest.counted + p.digest.pruned, p.notifiedVersion - p.changesSince);
    const d = await c.drainNotices(W);
    assert.equal(d.length, 1);
    assert.equal(d[0].redelivered, false);
    assert.deepEqual(await c.drainNotices(W), [], 'a drained notice is held');
    assert.equal((await c.releaseNotices(W, d)).length, 1);
    const sn = await c.snoozeNotice(W, d[0], new Date(Date.now() + 3600_000));
    assert.equal(sn.notifiedVersion, d[0].notifiedVersion);
    assert.deepEqual(await c.pendingNotices(W), [], 'a snoozed notice is hidden');
    await assert.rejects(c.snoozeNotice(W, d[0], new Date(Date.now() - 1000)), (e) => e.code === 'INVALID_ARGUMENT');
    const a = await c.dismissNotice(W, d[0]);
    assert.equal(a.outcome, 'acknowledged');
    assert.equal(a.dismissed, true);
    await assert.rejects(c.dismissNotice(W, d[0]), (e) => e.code === 'NOT_FOUND');
  } finally {
    await s.kill();
  }
});

test('Watcher: snooze() forgets a notice until the service delivers it again, with a higher delivery; dismiss() settles it, answered dismissed (RDL-2)', async () => {
  const dir = tempDir(), s = await startServer(join(dir, 'db'), await freePort(), ['--hold-poll', '100ms']);
  const child = 'agent:main:subagent:snz';
  try {
    await s.spawn(child, W);
    await s.human(child);
    const c = new Client(s.endpoint);
    const w = new Watcher(c, [W], fast);
    const [n] = await drainWait(w, 1, W);
    const sn = await w.snooze(n, new Date(Date.now() + 1500));
    assert.equal(sn.notifiedVersion, n.notifiedVersion);
    assert.deepEqual(w.drained(W), [], 'a snoozed notice is no longer held');
    assert.deepEqual(w.pending(W), [], 'nor open');
    assert.deepEqual(await c.pendingNotices(W), [], 'the service hides it too');
    const [back] = await drainWait(w, 1, W);
    assert.equal(back.notifiedVersion, n.notifiedVersion);
    assert.equal(back.text, n.text, 'the same notice, byte for byte (NTC-1)');
    assert.ok(back.delivery > n.delivery, `delivered again: delivery ${back.delivery} after ${n.delivery}`);
    const a = await w.dismiss(back);
    assert.equal(a.outcome, 'acknowledged');
    assert.equal(a.dismissed, true);
    assert.deepEqual(w.drained(W), [], 'settled');
    assert.deepEqual(await c.pendingNotices(W), []);
    await s.human(child);
    const [next] = await drainWait(w, 1, W);
    assert.equal(next.changesSince, n.notifiedVersion, 'the next change opens the next notice');
    await assert.rejects(w.dismiss(n), (e) => e.code === 'NOT_FOUND', 'a dismissed notice is not pending any more');
    await w.close();
  } finally {
    await s.kill();
  }
});

test('Watcher: a notice drained on the service and lost by a failed turn comes back, redelivered, after the stated turns, and drain() hands it out again (RDL-1)', async () => {
  const dir = tempDir(), s = await startServer(join(dir, 'db'), await freePort(), ['--redeliver-turns', '1']);
  const [a, b] = ['agent:main:subagent:rdla', 'agent:main:subagent:rdlb'];
  try {
    await s.spawn(a, W);
    await s.spawn(b, W);
    await s.human(a);
    await s.human(b);
    const c = new Client(s.endpoint);
    const w = new Watcher(c, [W], fast);
    const local = await drainWait(w, 2, W);
    assert.equal((await c.drainNotices(W)).length, 2, 'the service records the drain');
    // The turn acknowledges b only: one turn for a, which comes back redelivered.
    await w.ack(local.filter((n) => n.target === b));
    const [back] = await drainWait(w, 1, W);
    assert.equal(back.target, a);
    assert.equal(back.redelivered, true);
    assert.equal(back.delivery, 1);
    await w.ack([back]);
    await w.close();
  } finally {
    await s.kill();
  }
});
for (const b of backends()) {
  test(`Watcher: notices carry their generations, which survive a restart; the exact ack of the watcher's previous generation is refused with STALE_GENERATION (LIF-2) [${b.name}]`, async () => {
    const dir = tempDir(), db = await b.database(dir), port = await freePort();
    let s = await startServer(db.url, port);
    const child = 'agent:main:subagent:gen';
    const c = new Client(s.endpoint);
    try {
      await s.spawn(child, W);
      await s.human(child);
      const old = await c.pendingNotices(W);
      assert.equal(old.length, 1);
      assert.equal(old[0].targetGeneration, 1);
      assert.equal(old[0].watcherGeneration, 1);
      await s.gql(`mutation { resetSession(sessionKey: "${W}") }`);
      s = await s.restart('SIGKILL');
      await s.gql(`mutation { watch(input: {watcher: "${W}", target: "${child}"}) { watched } }`);
      await s.human(child);
      const fresh = await c.pendingNotices(W);
      assert.equal(fresh.length, 1);
      assert.equal(fresh[0].watcherGeneration, 2, 'the reset generation survived the restart');
      await assert.rejects(c.acknowledgeNotices(W, [{ ...old[0], notifiedVersion: fresh[0].notifiedVersion }]),
        (e) => e.code === Codes.StaleGeneration && e.permanent);
      assert.deepEqual(await c.pendingNotices(W), fresh, 'nothing acknowledged');
      const acks = await c.acknowledgeNotices(W, fresh);
      assert.deepEqual(acks.map((a) => a.outcome), ['acknowledged']);
    } finally {
      await s.kill();
      await db.drop();
    }
  });
}
