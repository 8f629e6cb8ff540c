// reconcile against a fake service: a page refused with RATE_LIMITED is asked again
// after its retryAfterMs (ERR-4), a longer wait is the caller's (REC-1).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { Client, reconcile, AwarenessError } from '../dist/index.js';

function event(sequence) {
  return { sequence, kind: 'run_completed', actorType: 'agent', actorId: null, summary: 's', occurredAt: '2026-01-01T00:00:00Z', runId: null, payload: null };
}

// fakeService answers each request with the next of answers (a function of the variables).
function fakeService(answers) {
  const seen = [];
  const srv = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      const vars = JSON.parse(body).variables;
      seen.push({ at: Date.now(), since: vars.s });
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify(answers[Math.min(seen.length - 1, answers.length - 1)](vars)));
    });
  });
  return new Promise((resolve) => srv.listen(0, '127.0.0.1', () => resolve({ srv, seen, url: `http://127.0.0.1:${srv.address().port}/query` })));
}

const limited = (ms) => () => ({ errors: [{ message: 'budget spent', extensions: { code: 'RATE_LIMITED', retryAfterMs: ms } }] });
const page = (events, truncated, next) => () => ({
  data: { sessionStatus: { stateVersion: 3, stateChanges: { events, historyGap: false, truncated, earliestAvailableSequence: 1, nextChangesSince: next } } },
});

test('ERR-4, REC-1: reconcile asks a RATE_LIMITED page again after its retryAfterMs', async () => {
  const { srv, seen, url } = await fakeService([page([event(1), event(2)], true, 2), limited(120), page([event(3)], false, 3)]);
  try {
    const r = await reconcile(new Client(url), { sessionKey: 'agent:main:subagent:x' }, 0);
    assert.deepEqual(r.events.map((e) => e.sequence), [1, 2, 3]);
    assert.equal(r.fullRefresh, false);
    assert.equal(seen.length, 3);
    assert.deepEqual(seen.map((s) => s.since), [0, 2, 2], 'the refused page is asked again from the same place');
    assert.ok(seen[2].at - seen[1].at >= 110, `asked again after ${seen[2].at - seen[1].at} ms, want at least retryAfterMs`);
  } finally {
    srv.close();
  }
});

test('ERR-4: a RATE_LIMITED wait longer than 5 s is the caller\'s', async () => {
  const { srv, seen, url } = await fakeService([limited(60000)]);
  try {
    await assert.rejects(reconcile(new Client(url), { sessionKey: 'agent:main:subagent:x' }, 0),
      (e) => e instanceof AwarenessError && e.code === 'RATE_LIMITED' && e.retryAfterMs === 60000);
    assert.equal(seen.length, 1);
  } finally {
    srv.close();
  }
});

test('reconcile: an abort during the wait ends it', async () => {
  const { srv, url } = await fakeService([limited(4000)]);
  try {
    const ac = new AbortController();
    setTimeout(() => ac.abort(new Error('stop')), 50);
    const t0 = Date.now();
    await assert.rejects(reconcile(new Client(url), { sessionKey: 'agent:main:subagent:x' }, 0, ac.signal), /stop/);
    assert.ok(Date.now() - t0 < 2000, 'the abort ended the wait');
  } finally {
    srv.close();
  }
});
