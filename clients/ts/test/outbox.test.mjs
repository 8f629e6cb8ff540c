// The outbox on its own, against a fake service: compaction, bound, order on reopen.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { statSync, appendFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client, Recorder, OutboxFullError, DeliveryError } from '../dist/index.js';
import { tempDir, freePort } from './helpers.mjs';

function fakeService() {
  const keys = new Set();
  const srv = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      const inputs = JSON.parse(body).variables.in;
      for (const ev of inputs) keys.add(ev.dedupeKey);
      const result = { recorded: true, stateVersion: 1, noticesOpened: 0, event: { sequence: 1 }, skippedWatchers: [] };
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify({ data: { recordEvents: inputs.map((_, index) => ({ index, result, error: null })) } }));
    });
  });
  return new Promise((resolve) => srv.listen(0, '127.0.0.1', () => resolve({ srv, keys, url: `http://127.0.0.1:${srv.address().port}/query` })));
}

test('outbox: delivered events are compacted out of the file', async () => {
  const { srv, keys, url } = await fakeService();
  const path = join(tempDir(), 'outbox');
  const rec = await Recorder.open(new Client(url), path, { compactBytes: 64 << 10 });
  const summary = 'x'.repeat(200), runId = 'r'.repeat(240);
  await Promise.all([0, 1, 2, 3].map(async (g) => {
    for (let i = 0; i < 200; i++) await rec.record({ sessionKey: `agent:main:subagent:c${g}`, kind: 'compacted', actorType: 'system', runId: `${runId}${i}`, summary });
  }));
  await rec.flush();
  assert.equal(keys.size, 800);
  assert.ok(statSync(path).size < 128 << 10, `the outbox is ${statSync(path).size} bytes after delivering everything`);
  await rec.close();
  const again = await Recorder.open(new Client(url), path);
  assert.equal(again.pending(), 0);
  await again.close();
  srv.close();
});

test('outbox: bound, torn last line and order on reopen', async () => {
  const url = `http://127.0.0.1:${await freePort()}/query`; // nobody listens: everything stays spooled
  const path = join(tempDir(), 'outbox');
  const rec = await Recorder.open(new Client(url, { timeoutMs: 200 }), path, { maxBytes: 32 << 10 });
  await assert.rejects(Recorder.open(new Client(url), path), /already open|in use/);
  let n = 0;
  for (;; n++) {
    try { await rec.record({ sessionKey: 'agent:main:subagent:x', kind: 'compacted', actorType: 'system', runId: `${n}` }); } catch (e) {
      assert.ok(e instanceof OutboxFullError, String(e));
      break;
    }
  }
  assert.ok(n > 50, `only ${n} events fit`);
  await rec.close();
  appendFileSync(path, '{"id":99999,"e":{"sessionKey":"agent:main:subagent:x","ki');
  const again = await Recorder.open(new Client(url, { timeoutMs: 200 }), path, { maxBytes: 32 << 10 });
  assert.equal(again.pending(), n);
  await again.close();
});

// A programmable fake of recordEvents: answer(inputs, n) returns the GraphQL answer of
// the n-th request (from 1); every request is kept with its time.
function scriptedService(answer) {
  const requests = [];
  const srv = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      const q = JSON.parse(body);
      requests.push({ at: Date.now(), query: q.query, inputs: q.variables.in });
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify(answer(q, requests.length)));
    });
  });
  return new Promise((resolve) => srv.listen(0, '127.0.0.1', () => resolve({ srv, requests, url: `http://127.0.0.1:${srv.address().port}/query` })));
}

const ok = { recorded: true, stateVersion: 1, noticesOpened: 0, event: { sequence: 1 }, skippedWatchers: [] };
const answerAll = (inputs) => ({ data: { recordEvents: inputs.map((_, index) => ({ index, result: ok, error: null })) } });
const ev = (i, session = 'agent:main:subagent:s') => ({ sessionKey: session, kind: 'compacted', actorType: 'system', runId: `r${i}` });

test('outbox: a RATE_LIMITED batch is sent again after its retryAfterMs, not before', async () => {
  const wait = 700;
  const { srv, requests, url } = await scriptedService((q, n) => (n <= 2
    ? { errors: [{ message: 'too many', extensions: { code: 'RATE_LIMITED', retryAfterMs: wait } }] }
    : answerAll(q.variables.in)));
  const rec = await Recorder.open(new Client(url), join(tempDir(), 'outbox'), { senders: 1 });
  try {
    for (let i = 0; i < 50; i++) await rec.record(ev(i));
    await rec.flush(20000);
    assert.equal(rec.stats.rateLimited, 2);
    for (let i = 1; i < 3; i++) {
      const gap = requests[i].at - requests[i - 1].at;
      assert.ok(gap >= wait, `request ${i + 1} came ${gap} ms after a refusal that asked for ${wait} ms`);
    }
    const sent = requests.slice(2).flatMap((r) => r.inputs.map((e) => e.runId));
    assert.deepEqual(sent, Array.from({ length: 50 }, (_, i) => `r${i}`));
  } finally {
    await rec.close();
    srv.close();
  }
});

test('outbox: an input the service could not take now is sent again with everything after it, in order', async () => {
  const { srv, requests, url } = await scriptedService((q, n) => {
    const inputs = q.variables.in;
    if (n === 1) {
      return { data: { recordEvents: inputs.map((_, index) => (index === 3
        ? { index, result: null, error: { code: 'UNAVAILABLE', message: 'try again' } }
        : { index, result: ok, error: null })) } };
    }
    return answerAll(inputs);
  });
  const rec = await Recorder.open(new Client(url), join(tempDir(), 'outbox'), { senders: 1 });
  try {
    await Promise.all(Array.from({ length: 10 }, (_, i) => rec.record(ev(i))));
    await rec.flush(20000);
    const runs = requests.map((r) => r.inputs.map((e) => e.runId));
    assert.deepEqual(runs[0], Array.from({ length: 10 }, (_, i) => `r${i}`));
    assert.deepEqual(runs.slice(1).flat(), ['r3', 'r4', 'r5', 'r6', 'r7', 'r8', 'r9']);
  } finally {
    await rec.close();
    srv.close();
  }
});

test('outbox: a service without recordEvents gets one recordEvent per event, and loses none', async () => {
  const { srv, requests, url } = await scriptedService((q) => (q.query.includes('recordEvents')
    ? { errors: [{ message: 'Cannot query field "recordEvents" on type "Mutation".', extensions: { code: 'GRAPHQL_VALIDATION_FAILED' } }] }
    : { data: { recordEvent: ok } }));
  const rec = await Recorder.open(new Client(url), join(tempDir(), 'outbox'));
  try {
    await Promise.all(Array.from({ length: 40 }, (_, i) => rec.record(ev(i, `agent:main:subagent:s${i % 8}`))));
    await rec.flush(20000);
    const single = requests.filter((r) => !r.query.includes('recordEvents')).map((r) => r.inputs.runId);
    assert.deepEqual(single.sort(), Array.from({ length: 40 }, (_, i) => `r${i}`).sort());
    assert.equal(rec.stats.dropped, 0);
  } finally {
    await rec.close();
    srv.close();
  }
});

test('outbox: a batch refused as a whole is halved until the one event it is about is dropped and reported', async () => {
  const { srv, requests, url } = await scriptedService((q) => (q.variables.in.some((e) => e.runId === 'r13')
    ? { errors: [{ message: 'r13 cannot be taken', extensions: { code: 'GRAPHQL_VALIDATION_FAILED' } }] }
    : answerAll(q.variables.in)));
  const errors = [];
  const rec = await Recorder.open(new Client(url), join(tempDir(), 'outbox'), { senders: 1 });
  rec.on('error', (e) => errors.push(e));
  try {
    await Promise.all(Array.from({ length: 30 }, (_, i) => rec.record(ev(i))));
    await rec.flush(20000);
    const delivered = requests.filter((r) => !r.inputs.some((e) => e.runId === 'r13')).flatMap((r) => r.inputs.map((e) => e.runId));
    assert.deepEqual(delivered, Array.from({ length: 30 }, (_, i) => `r${i}`).filter((r) => r !== 'r13'));
    assert.equal(errors.length, 1);
    assert.ok(errors[0] instanceof DeliveryError && errors[0].event.runId === 'r13', String(errors[0]));
    assert.equal(rec.stats.dropped, 1);
  } finally {
    await rec.close();
    srv.close();
  }
});
