// The gateway process the tests kill -9: records events from several concurrent
// loops through a Recorder and prints "OK <session> <runId>" after each record that
// resolved; with --flush it waits until the outbox is delivered.
//   node gatewayproc.mjs ENDPOINT OUTBOX RECORD_PER_SESSION PREFIX [--flush]
import { Client, Recorder } from '../dist/index.js';

const [endpoint, outbox, perArg, prefix, flag] = process.argv.slice(2);
const per = Number(perArg);
const rec = await Recorder.open(new Client(endpoint, { timeoutMs: 2000 }), outbox);
await Promise.all([0, 1, 2, 3].map(async (s) => {
  const key = `agent:main:subagent:ts${s}`;
  for (let i = 0; i < per; i++) {
    const runId = `${prefix}-${s}-${i}`;
    await rec.record({ sessionKey: key, kind: 'compacted', actorType: 'system', runId });
    process.stdout.write(`OK ${key} ${runId}\n`);
  }
}));
process.stdout.write('RECORDED\n');
if (flag === '--flush') { await rec.flush(); process.stdout.write('FLUSHED\n'); }
await rec.close();
