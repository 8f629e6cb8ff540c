// The Recorder against the real binary, on SQLite and PostgreSQL: kill -9 of the
// service and of the gateway, refusals at record time, a refused token, a refused
// event inside a batch, the rate limit (CLT-2, CLT-5, SIG-7).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { statSync, existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { Client, Recorder, RecordTimeoutError, InvalidEventError, DeliveryError, reconcile } from '../dist/index.js';
import { backends, tempDir, freePort, startServer, sleep, waitFor, authFile, unhandled } from './helpers.mjs';

const here = dirname(fileURLToPath(import.meta.url));

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

for (const b of backends()) {
  test(`Recorder: kill -9 of the service while recording from several loops (CLT-2, SIG-7) [${b.name}]`, async () => {
    const dir = tempDir(), db = await b.database(dir), port = await freePort();
    let s = await startServer(db.url, port);
    const client = new Client(`${s.base}/query`, { timeoutMs: 2000 });
    const rec = await Recorder.open(client, join(dir, 'outbox'));
    const acked = new Map(), attempted = new Set();
    let stop = false, maxMs = 0, recorded = 0;
    const more = async (what, n) => { const to = recorded + n; await waitFor(what, () => recorded >= to, 60000); };
    const loops = [0, 1, 2, 3].map(async (g) => {
      for (let i = 0; !stop; i++) {
        const key = `agent:main:subagent:k${g}-${i % 2}`, id = `r${g}-${i}`;
        attempted.add(id);
        const t0 = performance.now();
        await rec.record({ sessionKey: key, kind: 'compacted', actorType: 'system', runId: id });
        maxMs = Math.max(maxMs, performance.now() - t0);
        if (!acked.has(key)) acked.set(key, []);
        acked.get(key).push(id);
        recorded++;
        await sleep(1);
      }
    });
    try {
      await more('records before the kill', 50);
      await s.kill();
      await more('records while the service is down', 50);
      assert.ok(rec.pending() > 0, 'nothing spooled while the service was down');
      s = await startServer(db.url, port);
      await more('records after the restart', 50);
      stop = true;
      await Promise.all(loops);
      await rec.flush(60000);
      assert.ok(maxMs < 2000, `a record took ${maxMs} ms`);
      const n = await checkExactlyOnce(client, acked, attempted);
      assert.ok(n >= 150, `only ${n} records`);
      assert.ok(rec.stats.requests < n, `${rec.stats.requests} requests for ${n} events: no batching`);
    } finally {
      stop = true;
      await rec.close();
      await s.kill();
      await db.drop();
    }
  });

  test(`Recorder: kill -9 of the gateway process with a non-empty outbox (CLT-2, SIG-7) [${b.name}]`, async () => {
    const dir = tempDir(), db = await b.database(dir), port = await freePort();
    const endpoint = `http://127.0.0.1:${port}/query`, outbox = join(dir, 'outbox');
    const acked = new Map(), attempted = new Set();
    for (let s = 0; s < 4; s++) for (let i = 0; i < 1000; i++) for (const p of ['a', 'b']) attempted.add(`${p}-${s}-${i}`);
    await collect(gateway([endpoint, outbox, '1000', 'a']), acked, 800); // the service is down
    assert.ok(statSync(outbox).size > 0);
    const s = await startServer(db.url, port);
    try {
      await collect(gateway([endpoint, outbox, '1000', 'b']), acked, 1500); // delivering and recording
      await collect(gateway([endpoint, outbox, '0', 'c', '--flush']), acked, 0);
      const n = await checkExactlyOnce(new Client(endpoint), acked, attempted);
      assert.ok(n >= 2300, `only ${n} records`);
    } finally {
      await s.kill();
      await db.drop();
    }
  });

  test(`Recorder: an event the service would refuse is refused by record at once, and nothing enters the outbox (CLT-5) [${b.name}]`, async () => {
    const dir = tempDir(), db = await b.database(dir);
    const s = await startServer(db.url, await freePort());
    const client = new Client(s.endpoint), path = join(dir, 'outbox');
    const rec = await Recorder.open(client, path);
    const bad = [
      { sessionKey: 'agent:main:subagent:r', kind: 'human_direkt_message', actorType: 'human' },
      { sessionKey: 'agent:main:subagent:r', kind: 'compacted', actorType: 'system', summary: 'two\nlines' },
      { sessionKey: 'agent:main:subagent:r', kind: 'compacted', actorType: 'system', outcome: 'error' },
      { sessionKey: 'agent:main:subagent:r', kind: 'run_failed', actorType: 'system', outcome: 'crashed' },
      { sessionKey: 'agent:', kind: 'compacted', actorType: 'system' },
      { sessionKey: 'agent:main:subagent:r', kind: 'compacted', actorType: 'robot' },
      { sessionKey: 'agent:main:subagent:r', kind: 'compacted', actorType: 'system', summary: 'x'.repeat(201) },
      { sessionKey: 'agent:main:subagent:r', kind: 'compacted', actorType: 'system', turns: 0 },
      { sessionKey: 'agent:main:subagent:r', kind: 'compacted', actorType: 'system', occurredAt: 'yesterday' },
      { sessionKey: 'agent:main:subagent:r', kind: 'compacted', actorType: 'system', watchers: Array.from({ length: 33 }, (_, i) => `agent:main:w${i}`) },
    ];
    try {
      const size = statSync(path).size;
      for (const ev of bad) {
        const t0 = performance.now();
        const err = await rec.record(ev).then(() => null, (e) => e);
        assert.ok(err instanceof InvalidEventError, `${JSON.stringify(ev)}: ${err}`);
        assert.ok(performance.now() - t0 < 100, 'record waited before refusing');
        // The service's own answer to the same input.
        const want = await client.recordEvent(ev).then(() => null, (e) => e);
        assert.ok(want, `the service took ${JSON.stringify(ev)}`);
        assert.equal(err.code, want.code);
        if (want.code === 'INVALID_ARGUMENT') assert.equal(err.detail, want.detail);
      }
      assert.equal(rec.pending(), 0);
      assert.equal(statSync(path).size, size, 'the outbox grew');
      // A good event after them is recorded and delivered.
      const good = await rec.record({ sessionKey: 'agent:main:subagent:r', kind: 'compacted', actorType: 'system', runId: 'good' });
      assert.match(good.dedupeKey, /^outbox-[0-9a-f]{32}$/);
      await rec.flush(20000);
      assert.deepEqual(await runIds(client, 'agent:main:subagent:r'), ['good']);
    } finally {
      await rec.close();
      await s.kill();
      await db.drop();
    }
  });

  test(`Recorder: a retried record does not duplicate (generated dedupeKey, SIG-4) [${b.name}]`, async () => {
    const dir = tempDir(), db = await b.database(dir);
    const s = await startServer(db.url, await freePort());
    const client = new Client(s.endpoint);
    const rec = await Recorder.open(client, join(dir, 'outbox'));
    try {
      const ev = { sessionKey: 'agent:main:subagent:d', kind: 'compacted', actorType: 'system', runId: 'once' };
      const first = await rec.record(ev);
      const again = await rec.record(ev); // a retry with the same object
      assert.equal(again.dedupeKey, first.dedupeKey);
      assert.equal(again.occurredAt, first.occurredAt);
      const viaError = await rec.record(new RecordTimeoutError(first).event); // what a RecordTimeoutError carries
      assert.equal(viaError.dedupeKey, first.dedupeKey);
      ev.runId = 'twice'; // the same object changed: a new event
      const other = await rec.record(ev);
      assert.notEqual(other.dedupeKey, first.dedupeKey);
      // A Date is spooled as its ISO string; an invalid one is refused.
      const at = new Date(Date.now() - 60_000);
      const dated = await rec.record({ sessionKey: 'agent:main:subagent:d', kind: 'compacted', actorType: 'system', runId: 'dated', occurredAt: at });
      assert.equal(dated.occurredAt, at.toISOString());
      await assert.rejects(rec.record({ sessionKey: 'agent:main:subagent:d', kind: 'compacted', actorType: 'system', occurredAt: new Date('nope') }), InvalidEventError);
      await rec.flush(20000);
      assert.deepEqual(await runIds(client, 'agent:main:subagent:d'), ['once', 'twice', 'dated']);
      const r = await reconcile(client, { sessionKey: 'agent:main:subagent:d' }, 0);
      assert.equal(Date.parse(r.events[2].occurredAt), at.getTime());
    } finally {
      await rec.close();
      await s.kill();
      await db.drop();
    }
  });

  test(`Recorder: a refused token stops delivery and says so; resume delivers after the fix (CLT-1, CLT-5) [${b.name}]`, async () => {
    const dir = tempDir(), db = await b.database(dir), auth = authFile(dir);
    const s = await startServer(db.url, await freePort(), ['--auth-file', auth.path], auth.admin);
    const client = new Client(s.endpoint, { token: 'w'.repeat(48) });
    const rec = await Recorder.open(client, join(dir, 'outbox'));
    const errors = [];
    rec.on('error', (e) => errors.push(e));
    try {
      for (let i = 0; i < 20; i++) await rec.record({ sessionKey: 'agent:main:subagent:t', kind: 'compacted', actorType: 'system', runId: `t${i}` });
      await assert.rejects(rec.flush(10000), (e) => e.unauthenticated);
      assert.equal(errors.length, 1, `errors: ${errors}`);
      assert.ok(errors[0].unauthenticated && rec.stopped === errors[0] && rec.lastError === errors[0]);
      assert.equal(rec.pending(), 20);
      const requests = rec.stats.requests;
      await sleep(500);
      assert.equal(rec.stats.requests, requests, 'delivery went on with a refused token');
      client.setToken(auth.agents.main);
      rec.resume();
      await rec.flush(20000);
      assert.deepEqual(await runIds(new Client(s.endpoint, { token: auth.admin }), 'agent:main:subagent:t'), Array.from({ length: 20 }, (_, i) => `t${i}`));
    } finally {
      await rec.close();
      await s.kill();
      await db.drop();
    }
  });

  test(`Recorder: an event refused for the token is dropped and reported, the rest of its batch lands in order (CLT-1) [${b.name}]`, async () => {
    const dir = tempDir(), db = await b.database(dir), auth = authFile(dir, ['main', 'ops']);
    const port = await freePort();
    const client = new Client(`http://127.0.0.1:${port}/query`, { token: auth.agents.main });
    const errors = [];
    let s, rec;
    try {
      // Spooled while the service is down, then replayed as one batch.
      const spool = await Recorder.open(client, join(dir, 'outbox'));
      for (let i = 0; i < 30; i++) {
        await spool.record({ sessionKey: i % 10 === 5 ? 'agent:ops:subagent:x' : 'agent:main:subagent:m', kind: 'compacted', actorType: 'system', runId: `m${i}` });
      }
      await spool.close();
      s = await startServer(db.url, port, ['--auth-file', auth.path], auth.admin);
      rec = await Recorder.open(client, join(dir, 'outbox'), { senders: 1 });
      rec.on('error', (e) => errors.push(e));
      await rec.flush(20000);
      assert.equal(errors.length, 3, errors.join('; '));
      for (const e of errors) assert.ok(e instanceof DeliveryError && e.code === 'FORBIDDEN' && e.event.sessionKey === 'agent:ops:subagent:x', String(e));
      const want = Array.from({ length: 30 }, (_, i) => `m${i}`).filter((_, i) => i % 10 !== 5);
      assert.deepEqual(await runIds(new Client(s.endpoint, { token: auth.admin }), 'agent:main:subagent:m'), want);
      assert.deepEqual(await runIds(new Client(s.endpoint, { token: auth.admin }), 'agent:ops:subagent:x'), []);
      assert.equal(rec.stats.requests, 1);
    } finally {
      await rec?.close();
      await s?.kill();
      await db.drop();
    }
  });

  test(`Recorder: replay under the rate limit waits retryAfterMs and delivers exactly once, in order (ERR-4, SIG-7) [${b.name}]`, async () => {
    const dir = tempDir(), db = await b.database(dir), auth = authFile(dir), port = await freePort();
    const client = new Client(`http://127.0.0.1:${port}/query`, { token: auth.agents.main });
    const acked = new Map(), attempted = new Set();
    let s, rec;
    try {
      const spool = await Recorder.open(client, join(dir, 'outbox'));
      for (let i = 0; i < 100; i++) {
        const key = `agent:main:subagent:rl${i % 8}`, id = `q${i}`;
        attempted.add(id);
        await spool.record({ sessionKey: key, kind: 'compacted', actorType: 'system', runId: id });
        if (!acked.has(key)) acked.set(key, []);
        acked.get(key).push(id);
      }
      await spool.close();
      // Limited whether the service counts a batch as one write or by its inputs.
      s = await startServer(db.url, port, ['--auth-file', auth.path, '--rate-limit', '20', '--rate-burst', '4'], auth.admin);
      rec = await Recorder.open(client, join(dir, 'outbox'), { batchSize: 2 });
      await rec.flush(60000);
      assert.ok(rec.stats.rateLimited > 0, 'the rate limit was never reached');
      assert.equal(rec.stats.dropped, 0);
      assert.equal(await checkExactlyOnce(new Client(s.endpoint, { token: auth.admin }), acked, attempted), 100);
    } finally {
      await rec?.close();
      await s?.kill();
      await db.drop();
    }
  });
}

test('Recorder: no unhandled rejection', () => {
  assert.deepEqual(unhandled, []);
  assert.ok(existsSync(here));
});
