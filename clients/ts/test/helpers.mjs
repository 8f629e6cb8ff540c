// Test helpers: the real awareness binary ($AWARENESS_BIN) on a fixed loopback port,
// on SQLite or on a fresh PostgreSQL database (TEST_DATABASE_URL), stopped with
// SIGKILL or SIGTERM and started again on the same port and database; a loopback
// proxy that refuses WebSocket upgrades.
import { spawn } from 'node:child_process';
import { createServer, connect } from 'node:net';
import http from 'node:http';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';

export const bin = process.env.AWARENESS_BIN;
if (!bin) throw new Error('set AWARENESS_BIN to the awareness binary (.ci/run builds it)');

export function tempDir() { return mkdtempSync(join(tmpdir(), 'awareness-ts-')); }

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
    s.on('error', reject);
  });
}

let dbSeq = 0;

/** A fresh PostgreSQL database on the TEST_DATABASE_URL server: { url, drop() }. */
async function newPgDatabase() {
  const admin = process.env.TEST_DATABASE_URL;
  const name = `awareness_ts_${process.pid}_${++dbSeq}_${randomBytes(4).toString('hex')}`;
  const exec = async (sql) => {
    const c = new pg.Client({ connectionString: admin });
    await c.connect();
    try { await c.query(sql); } finally { await c.end(); }
  };
  await exec(`CREATE DATABASE ${name}`);
  await exec(`ALTER DATABASE ${name} SET synchronous_commit = off`);
  const u = new URL(admin);
  u.pathname = '/' + name;
  return { url: u.toString(), drop: () => exec(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`) };
}

/**
 * The databases every suite runs on: SQLite, and PostgreSQL when TEST_DATABASE_URL is
 * set. Without it the PostgreSQL suites say SKIPPED; under CI they fail instead.
 */
export function backends() {
  const out = [{ name: 'sqlite', database: async (dir) => ({ url: join(dir, 'awareness.db'), drop: async () => {} }) }];
  if (process.env.TEST_DATABASE_URL) {
    out.push({ name: 'postgres', database: () => newPgDatabase() });
  } else if (process.env.CI) {
    throw new Error('TEST_DATABASE_URL is not set: the clients/ts PostgreSQL suites cannot run (set it to an admin URL such as postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)');
  } else {
    console.log('SKIPPED clients/ts PostgreSQL suites: TEST_DATABASE_URL is not set (e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)');
  }
  return out;
}

/** An auth file with an admin token and one agent token per agent id: { path, admin, agents: {id: token} }. */
export function authFile(dir, agents = ['main']) {
  const admin = randomBytes(24).toString('hex');
  const tokens = [{ name: 'admin', role: 'admin', token: admin }];
  const byAgent = {};
  for (const a of agents) {
    byAgent[a] = randomBytes(24).toString('hex');
    tokens.push({ name: `gw-${a}`, role: `agent:${a}`, token: byAgent[a] });
  }
  const path = join(dir, 'auth.json');
  writeFileSync(path, JSON.stringify({ tokens }), { mode: 0o600 });
  return { path, admin, agents: byAgent };
}

export class Server {
  constructor(db, port, args = [], token = '') {
    this.db = db; this.port = port; this.args = args; this.token = token;
    this.base = `http://127.0.0.1:${port}`; this.endpoint = `${this.base}/query`; this.logs = '';
  }
  async start() {
    this.proc = spawn(bin, ['serve', '--addr', `127.0.0.1:${this.port}`, '--db', this.db, ...this.args], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.proc.stdout.on('data', (d) => { this.logs += d; });
    this.proc.stderr.on('data', (d) => { this.logs += d; });
    this.exited = new Promise((r) => this.proc.on('exit', r));
    const deadline = Date.now() + 30000;
    while (Date.now() < deadline) {
      try { const r = await fetch(`${this.base}/readyz`); if (r.ok) return this; } catch { /* not yet */ }
      if (this.proc.exitCode !== null) break;
      await sleep(20);
    }
    throw new Error(`the server did not start:\n${this.logs.slice(-3000)}`);
  }
  /** Stops the process with signal (SIGKILL: no shutdown at all) and waits for its end. */
  async stop(signal = 'SIGKILL') {
    if (this.proc.exitCode === null && this.proc.signalCode === null) { this.proc.kill(signal); await this.exited; }
  }
  kill() { return this.stop('SIGKILL'); }
  async restart(signal = 'SIGKILL') { await this.stop(signal); return this.start(); }
  async gql(query, variables = {}) {
    const r = await fetch(this.endpoint, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...(this.token ? { Authorization: `Bearer ${this.token}` } : {}) },
      body: JSON.stringify({ query, variables }),
    });
    const body = await r.json();
    if (body.errors) throw new Error(JSON.stringify(body.errors));
    return body.data;
  }
  record(input) { return this.gql(`mutation($in: RecordEventInput!) { recordEvent(input: $in) { stateVersion } }`, { in: input }); }
  spawn(child, parent) { return this.record({ sessionKey: child, kind: 'child_spawned', actorType: 'agent', actorId: parent, watchers: [parent] }); }
  human(key) { return this.record({ sessionKey: key, kind: 'human_direct_message', actorType: 'human', actorId: 'user:alice', channel: 'webchat' }); }
  async pending(watcher) { return (await this.gql(`query($w: String!) { pendingNotices(watcher: $w) { target notifiedVersion changesSince text } }`, { w: watcher })).pendingNotices; }
}

export async function startServer(db, port, args = [], token = '') { return new Server(db, port, args, token).start(); }

/**
 * A loopback HTTP proxy in front of port: plain requests (SSE streams included) pass;
 * WebSocket upgrades are answered 403 while refuse is true, and passed through
 * otherwise. upgrades counts the upgrade requests.
 */
export async function proxy(targetPort, { refuse = true } = {}) {
  const state = { refuse, upgrades: 0, sockets: new Set() };
  const target = `127.0.0.1:${targetPort}`;
  const server = http.createServer((req, res) => {
    const up = http.request({ host: '127.0.0.1', port: targetPort, method: req.method, path: req.url, headers: { ...req.headers, host: target } }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    });
    up.on('error', () => { if (!res.headersSent) res.writeHead(502); res.end(); });
    res.on('close', () => up.destroy());
    req.pipe(up);
  });
  server.on('connection', (s) => { state.sockets.add(s); s.on('close', () => state.sockets.delete(s)); });
  server.on('upgrade', (req, socket, head) => {
    state.upgrades++;
    if (state.refuse) {
      socket.end('HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: 24\r\nConnection: close\r\n\r\nupgrades are not allowed');
      return;
    }
    const back = connect(targetPort, '127.0.0.1', () => {
      const lines = [`${req.method} ${req.url} HTTP/1.1`];
      for (let i = 0; i < req.rawHeaders.length; i += 2) {
        lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i].toLowerCase() === 'host' ? target : req.rawHeaders[i + 1]}`);
      }
      back.write(lines.join('\r\n') + '\r\n\r\n');
      if (head.length) back.write(head);
      back.pipe(socket);
      socket.pipe(back);
    });
    back.on('error', () => socket.destroy());
    socket.on('error', () => back.destroy());
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const port = server.address().port;
  return {
    state, port, endpoint: `http://127.0.0.1:${port}/query`,
    /** Drops every connection through the proxy (the streams reconnect). */
    cut() { for (const s of state.sockets) s.destroy(); },
    close() { for (const s of state.sockets) s.destroy(); return new Promise((r) => server.close(r)); },
  };
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function waitFor(what, cond, ms = 15000) {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** Resolves with the next emission of event on emitter (rejects after ms). */
export function once(emitter, event, ms = 15000) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => { emitter.off(event, on); reject(new Error(`no ${event} event in ${ms} ms`)); }, ms);
    const on = (...args) => { clearTimeout(t); resolve(args); };
    emitter.once(event, on);
  });
}

/** Fails the test run if a promise rejection goes unhandled (a gateway crashes on one). */
export const unhandled = [];
process.on('unhandledRejection', (e) => { unhandled.push(e); });
