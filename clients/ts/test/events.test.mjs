// The EventFeed against the real binary, on SQLite and PostgreSQL: one session's
// events over the WebSocket and over SSE, resumed after the last sequence across
// restarts of the service (SIGKILL and SIGTERM), every event once and in order, each
// (re)subscription synced; a resume below the pruned history ends with HISTORY_GAP
// and the earliest available sequence (FEED-1, FEED-2, FEED-3).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { Client, EventFeed, AwarenessError, Codes } from '../dist/index.js';
import { backends, tempDir, freePort, startServer, waitFor, unhandled } from './helpers.mjs';

const K = 'agent:main:subagent:ts-feed';
const fast = { minBackoffMs: 20, maxBackoffMs: 200 };

/** Reads feed until its last sequence is target(), collecting events and synced markers. */
async function follow(feed, out, target) {
  for await (const it of feed) {
    if (it.type === 'event') out.events.push(it.event.sequence);
    if (it.type === 'synced') out.synced++;
    const t = target();
    if (t > 0 && feed.lastSequence === t) return;
  }
}

for (const b of backends()) {
  test(`EventFeed: every event once, in order, across restarts of the service, over the WebSocket and SSE (FEED-1, FEED-2, FEED-3) [${b.name}]`, async () => {
    const dir = tempDir();
    const db = await b.database(dir);
    const port = await freePort();
    // Bookmarks every 200 ms wake a feed that waits past the last event.
    const s = await startServer(db.url, port, ['--feed-bookmark', '200ms', '--notice-poll', '1s']);
    const client = new Client(s.endpoint);
    const feeds = ['websocket', 'sse'].map((transport) => ({ transport, feed: new EventFeed(client, { sessionKey: K }, { transport, afterSequence: 0, ...fast }), events: [], synced: 0 }));
    let target = 0;
    try {
      const done = feeds.map((f) => follow(f.feed, f, () => target));
      let written = 0;
      for (let round = 0; round < 4; round++) {
        for (let i = 0; i < 5; i++) written = (await s.record({ sessionKey: K, kind: 'run_completed', actorType: 'agent' })).recordEvent.stateVersion;
        await s.restart(round % 2 ? 'SIGTERM' : 'SIGKILL');
      }
      for (let i = 0; i < 5; i++) written = (await s.record({ sessionKey: K, kind: 'run_completed', actorType: 'agent' })).recordEvent.stateVersion;
      target = written;
      await Promise.all(done);
      for (const f of feeds) {
        assert.deepEqual(f.events, Array.from({ length: written }, (_, i) => i + 1), `${f.transport}: the events`);
        assert.ok(f.synced >= 2, `${f.transport}: ${f.synced} synced markers across 4 restarts`);
      }
    } finally {
      await Promise.all(feeds.map((f) => f.feed.close()));
      await s.stop();
      await db.drop();
    }
    assert.deepEqual(unhandled, []);
  });

  test(`EventFeed: a resume below the pruned history ends with HISTORY_GAP and the earliest available sequence (FEED-1) [${b.name}]`, async () => {
    const dir = tempDir();
    const db = await b.database(dir);
    const s = await startServer(db.url, await freePort(), ['--max-rows', '5', '--prune-interval', '1s']);
    try {
      for (let i = 0; i < 20; i++) await s.record({ sessionKey: K, kind: 'run_completed', actorType: 'agent' });
      let earliest = 0;
      await waitFor('the pruner', async () => {
        const st = (await s.gql(`query($k: String!) { sessionStatus(sessionKey: $k, changesSince: 0, limit: 1) { stateChanges { historyGap earliestAvailableSequence } } }`, { k: K })).sessionStatus.stateChanges;
        earliest = st.earliestAvailableSequence;
        return st.historyGap;
      });
      const client = new Client(s.endpoint);
      for (const transport of ['websocket', 'sse']) {
        const feed = new EventFeed(client, { sessionKey: K }, { transport, afterSequence: 1, ...fast });
        try {
          await assert.rejects(async () => { for await (const _ of feed) { /* nothing comes */ } }, (e) => {
            assert.ok(e instanceof AwarenessError, String(e));
            assert.equal(e.code, Codes.HistoryGap);
            assert.equal(e.earliestAvailableSequence, earliest);
            return true;
          }, transport);
        } finally {
          await feed.close();
        }
        const resumed = new EventFeed(client, { sessionKey: K }, { transport, afterSequence: earliest - 1, ...fast });
        const out = { events: [], synced: 0 };
        await follow(resumed, out, () => 20);
        await resumed.close();
        assert.deepEqual(out.events, Array.from({ length: 21 - earliest }, (_, i) => earliest + i), transport);
      }
    } finally {
      await s.stop();
      await db.drop();
    }
  });
}
