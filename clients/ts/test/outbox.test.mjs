// The outbox on its own, against a fake service: compaction, bound, order on reopen.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { statSync, appendFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client, Recorder, OutboxFullError } from '../dist/index.js';
import { tempDir, freePort } from './helpers.mjs';

function fakeService() {
  const keys = new Set();
  const srv = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      keys.add(JSON.parse(body).variables.in.dedupeKey);
      res.setHeader('Content-Type', 'application/json');
      res.end('{"data":{"recordEvent":{"recorded":true,"stateVersion":1,"event":{"sequence":1},"skippedWatchers":[]}}}');
    });
  });
  return new Promise((resolve) => srv.listen(0, '127.0.0.1', () => resolve({ srv, keys, url: `http://127.0.0.1:${srv.address().port}/query` })));
}

test('outbox: delivered events are compacted out of the file', async () => {
  const { srv, keys, url } = await fakeService();
  const path = join(tempDir(), 'outbox');
  const rec = await Recorder.open(new Client(url), path, { compactBytes: 64 << 10 });
  const summary = 'x'.repeat(500);
  await Promise.all([0, 1, 2, 3].map(async (g) => {
    for (let i = 0; i < 200; i++) await rec.record({ sessionKey: `agent:main:subagent:c${g}`, kind: 'compacted', actorType: 'system', runId: `${i}`, summary });
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
