// The Node peer of the WebSocket runs: the reference stack a user
// would pick instead of the service — graphql-js, graphql-ws's server on ws — with the
// service's staleNotices type, in memory. It speaks bench/cmd/wsbaseline's triggers, so
// that bench/cmd/wsload drives it with -mode baseline:
//
//   POST /notify     {"watcher": i, "target": T}   one notice for watcher i on T (L1 a)
//   POST /broadcast  {"target": T, "count": n}     one notice on T for watchers 0..n-1
//   GET  /readyz, /healthz                         ok
//   GET  /debug/stats                              heap, subscriptions
//
// Both triggers answer first and then publish, as the service answers recordEvent once
// committed and publishes afterwards. Usage: node server.mjs -addr 127.0.0.1:PORT
import http from 'node:http';
import { WebSocketServer } from 'ws';
import { useServer } from 'graphql-ws/use/ws';
import { buildSchema } from 'graphql';

const schema = buildSchema(`
scalar Time
type StaleNotice {
  watcher: String!
  target: String!
  targetAgentId: String!
  changesSince: Int!
  notifiedVersion: Int!
  materialVersion: Int!
  text: String!
  wake: Boolean!
  openedAt: Time!
}
type Query { ok: Boolean! }
type Subscription { staleNotices(watcher: String): StaleNotice! }
`);

// Live subscriptions by watcher: each is a push function into its async iterator.
const byWatcher = new Map();
let subscriptions = 0;
let version = 0;

function subscribe(watcher) {
  const queue = [];
  let wake = null;
  let done = false;
  const push = (n) => {
    if (wake) { const w = wake; wake = null; w({ value: { staleNotices: n }, done: false }); }
    else queue.push({ staleNotices: n });
  };
  let set = byWatcher.get(watcher);
  if (!set) { set = new Set(); byWatcher.set(watcher, set); }
  set.add(push);
  subscriptions++;
  const end = () => {
    if (done) return;
    done = true;
    subscriptions--;
    set.delete(push);
    if (set.size === 0) byWatcher.delete(watcher);
    if (wake) { const w = wake; wake = null; w({ value: undefined, done: true }); }
  };
  return {
    [Symbol.asyncIterator]() { return this; },
    next() {
      if (queue.length) return Promise.resolve({ value: queue.shift(), done: false });
      if (done) return Promise.resolve({ value: undefined, done: true });
      return new Promise((r) => { wake = r; });
    },
    return() { end(); return Promise.resolve({ value: undefined, done: true }); },
    throw(e) { end(); return Promise.reject(e); },
  };
}

// The subscription field's resolvers (buildSchema leaves them to the caller).
schema.getSubscriptionType().getFields().staleNotices.subscribe = (_s, args) => subscribe(args.watcher ?? '');
schema.getSubscriptionType().getFields().staleNotices.resolve = (payload) => payload.staleNotices;

function agentOf(key) {
  const m = /^agent:([^:]+):/.exec(key);
  return m ? m[1] : 'main';
}

// The service's notice text for changesSince 0 (internal/awareness/notice.go).
function notice(watcher, target, now) {
  version++;
  return {
    watcher, target, targetAgentId: agentOf(target), changesSince: 0,
    notifiedVersion: version, materialVersion: version,
    text: `Session "${target}" changed (other actor). Reconcile before acting: session_status sessionKey "${target}" changesSince 0.`,
    wake: watcher.endsWith(':main'), openedAt: now,
  };
}

function publish(n) {
  const set = byWatcher.get(n.watcher);
  if (set) for (const push of set) push(n);
  const all = byWatcher.get('');
  if (all) for (const push of all) push(n);
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    let b = '';
    req.on('data', (c) => { b += c; });
    req.on('end', () => { try { resolve(JSON.parse(b)); } catch (e) { reject(e); } });
    req.on('error', reject);
  });
}

const watcherKey = (i) => `agent:w${i}:main`; // bench/internal/loadkeys.Watcher

const server = http.createServer(async (req, res) => {
  const answer = (sent) => { res.writeHead(200, { 'Content-Type': 'application/json' }); res.end(JSON.stringify({ sent })); };
  try {
    if (req.method === 'GET' && (req.url === '/readyz' || req.url === '/healthz')) { res.end('ok\n'); return; }
    if (req.method === 'GET' && req.url === '/debug/stats') {
      const m = process.memoryUsage();
      res.end(JSON.stringify({ heap_inuse: m.heapUsed, sys: m.rss, subscriptions }));
      return;
    }
    if (req.method === 'POST' && req.url === '/notify') {
      const { watcher, target } = await readBody(req);
      const n = notice(watcherKey(watcher), target, new Date().toISOString());
      answer(1);
      publish(n);
      return;
    }
    if (req.method === 'POST' && req.url === '/broadcast') {
      const { target, count } = await readBody(req);
      const now = new Date().toISOString();
      const ns = [];
      for (let i = 0; i < count; i++) ns.push(notice(watcherKey(i), target, now));
      answer(ns.length);
      for (const n of ns) publish(n);
      return;
    }
    res.writeHead(404); res.end();
  } catch (e) {
    res.writeHead(400); res.end(String(e));
  }
});

const wss = new WebSocketServer({ server, path: '/query' });
useServer({ schema }, wss);

let addr = '127.0.0.1:8092';
const i = process.argv.indexOf('-addr');
if (i > 0) addr = process.argv[i + 1];
const [host, port] = addr.split(':');
server.listen(Number(port), host);
const stop = () => { wss.close(); server.close(); process.exit(0); };
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
