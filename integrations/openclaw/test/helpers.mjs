// Test helpers: the real awareness binary ($AWARENESS_BIN) on a free loopback port and
// a fresh SQLite file, and a stand-in for the API object OpenClaw hands register(),
// which keeps the hooks, tools and services registered and calls them as OpenClaw would.
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const bin = process.env.AWARENESS_BIN;
if (!bin) throw new Error('set AWARENESS_BIN to the awareness binary (.ci/run builds it)');

export function tempDir() { return mkdtempSync(join(tmpdir(), 'awareness-openclaw-')); }

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function waitFor(what, cond, ms = 15000) {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
    s.on('error', reject);
  });
}

/** The service with --notice-tool awareness_status, as a deployment inside OpenClaw runs it. */
export async function startService(args = ['--notice-tool', 'awareness_status'], { dir = tempDir(), port } = {}) {
  port ??= await freePort();
  const base = `http://127.0.0.1:${port}`;
  const proc = spawn(bin, ['serve', '--addr', `127.0.0.1:${port}`, '--db', join(dir, 'a.db'), '--rate-limit', '0', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let logs = '';
  proc.stdout.on('data', (d) => { logs += d; });
  proc.stderr.on('data', (d) => { logs += d; });
  const exited = new Promise((r) => proc.on('exit', r));
  const deadline = Date.now() + 30000;
  for (;;) {
    try { const r = await fetch(`${base}/readyz`); if (r.ok) break; } catch { /* not yet */ }
    if (proc.exitCode !== null || Date.now() > deadline) throw new Error(`the service did not start:\n${logs}`);
    await sleep(20);
  }
  const gql = async (query, variables = {}) => {
    const r = await fetch(`${base}/query`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ query, variables }) });
    const body = await r.json();
    if (body.errors) throw new Error(JSON.stringify(body.errors));
    return body.data;
  };
  const record = (input) => gql(`mutation($in: RecordEventInput!) { recordEvent(input: $in) { stateVersion noticesOpened } }`, { in: input });
  return {
    url: `${base}/query`, dir, port, gql, record,
    spawn: (child, parent) => record({ sessionKey: child, kind: 'child_spawned', actorType: 'agent', actorId: parent, watchers: [parent] }),
    human: (key) => record({ sessionKey: key, kind: 'human_direct_message', actorType: 'human', channel: 'webchat' }),
    pending: async (w) => (await gql(`query($w: String!) { pendingNotices(watcher: $w) { target notifiedVersion changesSince text wake } }`, { w })).pendingNotices,
    log: async (key, agentId) => (await gql(`query($k: String!, $a: String) { sessionStatus(sessionKey: $k, agentId: $a, changesSince: 0) { stateChanges { events { sequence kind actorType actorId summary runId payload } } } }`,
      { k: key, a: agentId })).sessionStatus.stateChanges.events,
    async stop() { if (proc.exitCode === null) { proc.kill('SIGKILL'); await exited; } },
  };
}

/**
 * A stand-in for OpenClaw's plugin API: what register() registers, and what the
 * runtime hands back (the session store, system events and heartbeat requests).
 */
export function fakeApi({ pluginConfig, registrationMode = 'full', sessions = {}, stateDir } = {}) {
  const api = {
    id: 'awareness',
    registrationMode,
    config: { agents: { list: [{ id: 'main' }] } },
    pluginConfig,
    hooks: {},
    tools: [],
    services: [],
    logs: [],
    wakes: [],
    systemEvents: [],
    logger: {
      debug: (m) => api.logs.push(`debug ${m}`),
      info: (m) => api.logs.push(`info ${m}`),
      warn: (m) => api.logs.push(`warn ${m}`),
      error: (m) => api.logs.push(`error ${m}`),
    },
    runtime: {
      state: { resolveStateDir: () => stateDir },
      system: {
        enqueueSystemEvent: (text, opts) => { api.systemEvents.push({ text, ...opts }); return true; },
        requestHeartbeat: (opts) => { api.wakes.push(opts); },
      },
      agent: {
        session: {
          getSessionEntry: ({ sessionKey }) => sessions[sessionKey],
          listSessionEntries: () => Object.entries(sessions).map(([sessionKey, entry]) => ({ sessionKey, entry })),
        },
      },
    },
    on(name, handler, opts) { (api.hooks[name] ??= []).push({ handler, opts }); },
    registerTool(tool, opts) { api.tools.push({ tool, opts }); },
    registerService(s) { api.services.push(s); },
    /** Runs every handler of hook name as OpenClaw does and returns their results. */
    async fire(name, event, ctx) {
      const out = [];
      for (const { handler } of api.hooks[name] ?? []) out.push(await handler(event, ctx));
      return out;
    },
    async start() { for (const s of api.services) await s.start({}); },
    async stop() { for (const s of api.services) await s.stop?.({}); },
  };
  return api;
}
