// The TypeScript client against the real binary: the same scenarios as the Go
// client's (CLT-2, SIG-7, NTC-3, NTC-5).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { statSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { Client, Recorder, Watcher, reconcile } from '../dist/index.js';
import { bin, tempDir, freePort, startServer, sleep, waitFor } from './helpers.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const W = 'agent:main:main';
if (!bin) throw new Error('set AWARENESS_BIN to the awareness binary');

async function runIds(client, key) {
  const r = await reconcile(client, { sessionKey: key }, 0);
  assert.equal(r.fullRefresh, false, r.reason);
  r.events.forEach((e, i) => assert.equal(e.sequence, i + 1));
  return r.events.map((e) => e.runId).filter(Boolean);
}

// Every acknowledged run id is in its session's log exactly once and in order; the
// log holds nothing that was never recorded.
async function checkExactlyOnce(client, acked, attempted) {
  let total = 0;
  for (const [key, want] of acked) {
    const got = await runIds(client, key);
    assert.equal(new Set(got).size, got.length, `${key}: a run is in the log twice`);
    for (const id of got) assert.ok(attempted.has(id), `${key}: ${id} was never recorded`);
    const wanted = new Set(want);
    assert.deepEqual(got.filter((id) => wanted.has(id)), want, `${key}: loss or reordering`);
    total += want.length;
  }
  return total;
}

test('Recorder: kill -9 of the service while recording from several loops (CLT-2, SIG-7)', async () => {
  const dir = tempDir(), port = await freePort();
  let s = await startServer(join(dir, 'db'), port);
  const client = new Client(`${s.base}/query`, { timeoutMs: 2000 });
  const rec = await Recorder.open(client, join(dir, 'outbox'));
  const acked = new Map(), attempted = new Set();
  let stop = false, maxMs = 0;
  const loops = [0, 1, 2, 3].map(async (g) => {
    for (let i = 0; !stop; i++) {
      const key = `agent:main:subagent:k${g}-${i % 2}`, id = `r${g}-${i}`;
      attempted.add(id);
      const t0 = performance.now();
      await rec.record({ sessionKey: key, kind: 'compacted', actorType: 'system', runId: id });
      maxMs = Math.max(maxMs, performance.now() - t0);
      if (!acked.has(key)) acked.set(key, []);
      acked.get(key).push(id);
      await sleep(1);
    }
  });
  try {
    await sleep(500);
    await s.kill();
    await sleep(1000);
    assert.ok(rec.pending() > 0, 'nothing spooled while the service was down');
    s = await startServer(join(dir, 'db'), port);
    await sleep(500);
    stop = true;
    await Promise.all(loops);
    await rec.flush(60000);
    assert.ok(maxMs < 2000, `a record took ${maxMs} ms`);
    const n = await checkExactlyOnce(client, acked, attempted);
    assert.ok(n > 100, `only ${n} records`);
  } finally {
    stop = true;
    await rec.close();
    await s.kill();
  }
});

function gateway(args) {
  const p = spawn(process.execPath, [join(here, 'gatewayproc.mjs'), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  p.stderr.on('data', (d) => { stderr += d; });
  const lines = createInterface({ input: p.stdout });
  const exited = new Promise((r) => p.on('exit', (code, signal) => r({ code, signal })));
  return { p, lines, exited, stderr: () => stderr };
}

// Reads OK lines into acked; kill -9s the process after killAfter of them (0: wait for its end).
async function collect(g, acked, killAfter) {
  let n = 0;
  for await (const line of g.lines) {
    const f = line.split(' ');
    if (f.length === 3 && f[0] === 'OK') {
      if (!acked.has(f[1])) acked.set(f[1], []);
      acked.get(f[1]).push(f[2]);
      n++;
      if (killAfter && n === killAfter) g.p.kill('SIGKILL');
    }
  }
  const { code, signal } = await g.exited;
  if (killAfter) assert.equal(signal, 'SIGKILL', `the gateway ended before it was killed: ${g.stderr()}`);
  else assert.equal(code, 0, g.stderr());
}

test('Recorder: kill -9 of the gateway process with a non-empty outbox (CLT-2, SIG-7)', async () => {
  const dir = tempDir(), port = await freePort();
  const endpoint = `http://127.0.0.1:${port}/query`, outbox = join(dir, 'outbox');
  const acked = new Map(), attempted = new Set();
  for (let s = 0; s < 4; s++) for (let i = 0; i < 1000; i++) for (const p of ['a', 'b']) attempted.add(`${p}-${s}-${i}`);
  await collect(gateway([endpoint, outbox, '1000', 'a']), acked, 800); // the service is down
  assert.ok(statSync(outbox).size > 0);
  const s = await startServer(join(dir, 'db'), port);
  try {
    await collect(gateway([endpoint, outbox, '1000', 'b']), acked, 1500); // delivering and recording
    await collect(gateway([endpoint, outbox, '0', 'c', '--flush']), acked, 0);
    const n = await checkExactlyOnce(new Client(endpoint), acked, attempted);
    assert.ok(n >= 2300, `only ${n} records`);
  } finally {
    await s.kill();
  }
});

async function drainWait(w, n, ...watchers) {
  const got = [];
  const deadline = Date.now() + 15000;
  while (got.length < n) {
    got.push(...w.drain(...watchers));
    if (got.length >= n) break;
    if (Date.now() > deadline) throw new Error(`drained ${got.length} notices, want ${n}`);
    await sleep(20);
  }
  assert.equal(got.length, n, JSON.stringify(got));
  return got;
}

test('Watcher: a notice is handed out once across server restarts (NTC-5, NTC-7)', async () => {
  const dir = tempDir(), port = await freePort();
  let s = await startServer(join(dir, 'db'), port);
  const child = 'agent:main:subagent:w1';
  await s.spawn(child, W);
  const w = new Watcher(new Client(`${s.base}/query`), [W], { minBackoffMs: 20, maxBackoffMs: 200 });
  try {
    await w.waitConnected();
    await s.human(child);
    let first = await drainWait(w, 1);
    assert.equal(first[0].text, `Session "${child}" changed (other actor). Reconcile before acting: session_status sessionKey "${child}" changesSince 1.`);
    assert.equal(first[0].wake, true);
    for (let round = 0; round < 2; round++) {
      const dups = w.duplicates;
      await s.kill();
      s = await startServer(join(dir, 'db'), port);
      await waitFor('the replay to arrive and be dropped', () => w.duplicates > dups);
      await sleep(400);
      assert.deepEqual(w.drain(), [], `round ${round}: handed out again`);
      if (round === 0) {
        await s.human(child);
        const fu = await w.ack(first);
        assert.equal(fu.length, 1);
        assert.equal(fu[0].changesSince, first[0].notifiedVersion);
        first = await drainWait(w, 1);
        await sleep(400);
        assert.deepEqual(w.drain(), [], 'the follow-up was handed out twice');
      }
    }
  } finally {
    await w.close();
    await s.kill();
  }
});

test('Watcher: ack acknowledges only what was drained (NTC-3)', async () => {
  const dir = tempDir(), port = await freePort();
  const s = await startServer(join(dir, 'db'), port);
  const [c1, c2, c3] = ['agent:main:subagent:a1', 'agent:main:subagent:a2', 'agent:main:subagent:a3'];
  for (const k of [c1, c2, c3]) await s.spawn(k, W);
  const w = new Watcher(new Client(`${s.base}/query`), [W], { minBackoffMs: 20 });
  const exactAck = (target, v) => s.gql(`mutation($w: String!, $n: [NoticeRef!]) { ackNotices(watcher: $w, notices: $n) { target } }`,
    { w: W, n: [{ target, notifiedVersion: v }] });
  try {
    await w.waitConnected();
    await s.human(c3);
    await waitFor('the c3 notice', () => w.pending().length === 1);
    await exactAck(c3, w.pending()[0].notifiedVersion);
    await waitFor('the closed c3 notice to be dropped', () => w.pending().length === 0);

    await s.human(c1);
    const drained = await drainWait(w, 1);
    const old = drained[0].notifiedVersion;
    await exactAck(c1, old);
    await s.human(c1);
    await s.human(c2);
    const later = await drainWait(w, 2);
    await w.ack(drained);
    const pending = await s.pending(W);
    const got = Object.fromEntries(pending.map((n) => [n.target, n.notifiedVersion]));
    assert.equal(pending.length, 2, JSON.stringify(pending));
    assert.ok(got[c1] > old && got[c2] > 0, JSON.stringify(pending));
    await w.ack(later);
    assert.deepEqual(await s.pending(W), []);
  } finally {
    await w.close();
    await s.kill();
  }
});
