// Times the replay of a spooled outbox by the TypeScript Recorder against the real
// binary: SQLite, default limits, an agent token. The events are spooled while the
// service is down; then the service starts and a Recorder opened on the outbox
// delivers them (recordEvents batches). The baseline of the same run replays with one
// event per request (batchSize 1). Each run checks that every event is in the log
// exactly once and in order per session.
//
//   AWARENESS_BIN=/path/to/awareness node bench/replay.mjs [events] [baseline-events] [rounds]
//
// Defaults: 10000 events, 1000 baseline events, 3 rounds (interleaved).
import { mkdtempSync, rmSync, readFileSync } from 'node:fs';
import { tmpdir, loadavg } from 'node:os';
import { join } from 'node:path';
import { Client, Recorder, reconcile } from '../dist/index.js';
import { authFile, freePort, startServer } from '../test/helpers.mjs';

const [events = 10000, baselineEvents = 1000, rounds = 3] = process.argv.slice(2).map(Number);
const sessions = 50;

async function run(n, batchSize) {
  const dir = mkdtempSync(join(tmpdir(), 'awareness-replay-'));
  const auth = authFile(dir);
  const port = await freePort();
  const client = new Client(`http://127.0.0.1:${port}/query`, { token: auth.agents.main, timeoutMs: 30000 });
  const spool = await Recorder.open(client, join(dir, 'outbox'), { recordTimeoutMs: 60_000 });
  for (let i = 0; i < n; i += 500) {
    await Promise.all(Array.from({ length: Math.min(500, n - i) }, (_, j) => spool.record({
      sessionKey: `agent:main:subagent:b${(i + j) % sessions}`, kind: 'compacted', actorType: 'system', runId: `e${i + j}`,
    })));
  }
  await spool.close();
  const s = await startServer(join(dir, 'awareness.db'), port, ['--auth-file', auth.path]);
  try {
    const cpu0 = process.cpuUsage(), srv0 = cpuMs(s.proc.pid), t0 = performance.now();
    const rec = await Recorder.open(client, join(dir, 'outbox'), { batchSize });
    await rec.flush(600_000);
    const ms = performance.now() - t0;
    const c = process.cpuUsage(cpu0);
    const cpu = { client: (c.user + c.system) / 1000, server: cpuMs(s.proc.pid) - srv0 };
    const stats = { ...rec.stats };
    await rec.close();
    for (let k = 0; k < sessions; k++) {
      const r = await reconcile(client, { sessionKey: `agent:main:subagent:b${k}` }, 0);
      const want = Array.from({ length: Math.ceil((n - k) / sessions) }, (_, j) => `e${k + j * sessions}`);
      const got = r.events.map((e) => e.runId);
      if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error(`session b${k}: the log is not every event once, in order`);
    }
    return { ms, stats, cpu };
  } finally {
    await s.kill();
    rmSync(dir, { recursive: true, force: true });
  }
}

// CPU time (user + system) of a process so far, in ms.
function cpuMs(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
}

const fmt = (x) => x.toFixed(0);
const results = { batch: [], single: [] };
for (let r = 0; r < rounds; r++) {
  const la = loadavg()[0].toFixed(1);
  const b = await run(events, 200);
  const s = await run(baselineEvents, 1);
  results.batch.push(b);
  results.single.push(s);
  console.log(`round ${r + 1} (load ${la}): ${events} events in ${fmt(b.ms)} ms (${fmt(events / b.ms * 1000)}/s, ${b.stats.requests} requests, ` +
    `${b.stats.rateLimited} RATE_LIMITED, CPU client ${fmt(b.cpu.client)} ms, service ${fmt(b.cpu.server)} ms); ` +
    `baseline ${baselineEvents} one per request in ${fmt(s.ms)} ms (${fmt(baselineEvents / s.ms * 1000)}/s, ${s.stats.rateLimited} RATE_LIMITED)`);
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const bRate = median(results.batch.map((x) => events / x.ms)), sRate = median(results.single.map((x) => baselineEvents / x.ms));
console.log(`median: ${events} events replayed in ${fmt(median(results.batch.map((x) => x.ms)))} ms; ${fmt(bRate * 1000)} events/s against ${fmt(sRate * 1000)} one per request: ${(bRate / sRate).toFixed(1)}x`);
