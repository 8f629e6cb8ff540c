// Test helpers: the real awareness binary ($AWARENESS_BIN) on a fixed loopback port,
// killed with SIGKILL and started again on the same port and database.
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const bin = process.env.AWARENESS_BIN;

export function tempDir() { return mkdtempSync(join(tmpdir(), 'awareness-ts-')); }

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
    s.on('error', reject);
  });
}

export class Server {
  constructor(db, port) { this.db = db; this.port = port; this.base = `http://127.0.0.1:${port}`; this.logs = ''; }
  async start() {
    this.proc = spawn(bin, ['serve', '--addr', `127.0.0.1:${this.port}`, '--db', this.db], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.proc.stdout.on('data', (d) => { this.logs += d; });
    this.proc.stderr.on('data', (d) => { this.logs += d; });
    this.exited = new Promise((r) => this.proc.on('exit', r));
    const deadline = Date.now() + 15000;
    while (Date.now() < deadline) {
      try { const r = await fetch(`${this.base}/readyz`); if (r.ok) return this; } catch { /* not yet */ }
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error(`the server did not start:\n${this.logs.slice(-3000)}`);
  }
  async kill() { if (this.proc.exitCode === null && this.proc.signalCode === null) { this.proc.kill('SIGKILL'); await this.exited; } }
  async gql(query, variables = {}) {
    const r = await fetch(`${this.base}/query`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ query, variables }) });
    const body = await r.json();
    if (body.errors) throw new Error(JSON.stringify(body.errors));
    return body.data;
  }
  record(input) { return this.gql(`mutation($in: RecordEventInput!) { recordEvent(input: $in) { stateVersion } }`, { in: input }); }
  spawn(child, parent) { return this.record({ sessionKey: child, kind: 'child_spawned', actorType: 'agent', actorId: parent, watchers: [parent] }); }
  human(key) { return this.record({ sessionKey: key, kind: 'human_direct_message', actorType: 'human', actorId: 'user:alice', channel: 'webchat' }); }
  async pending(watcher) { return (await this.gql(`query($w: String!) { pendingNotices(watcher: $w) { target notifiedVersion } }`, { w: watcher })).pendingNotices; }
}

export async function startServer(db, port) { return new Server(db, port).start(); }

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function waitFor(what, cond, ms = 15000) {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}
