// Third-party GraphQL clients, each with its default options, all against one real
// server, for the end-to-end deploy tests (e2e/clients_test.go).
//
//   node clients.mjs <http-url> <ws-url> <watcher>
//
// Each client runs a query and a mutation, then subscribes to staleNotices(watcher)
// and keeps the subscription open (it is never told about a server restart). Output,
// one line each, all times in ms since the epoch:
//
//   <client> READY <t>             the query and the mutation answered, subscribed
//   <client> NOTICE <t> <json>     a notice arrived
//   <client> ERROR <t> <message>   the client reported an error (it gave up)
//   mix DONE <t> <json>            the traffic asked for by a "mix" line on stdin is done
//
// Clients: apollo (Apollo Client 4: HttpLink + GraphQLWsLink), urql (@urql/core: queries
// as GET within the URL limit, its default; subscriptionExchange over graphql-ws),
// graphql-ws, graphql-ws-retry (graphql-ws with shouldRetry: () => true),
// subscriptions-transport-ws and graphql-sse. Options passed are only what Node needs
// and a browser has built in (the WebSocket implementation), plus reconnect: true for
// subscriptions-transport-ws, whose default is not to reconnect at all, and the
// shouldRetry of graphql-ws-retry.
//
// Each line "mix" on stdin runs the rest of a real deployment's traffic once, beside the
// open subscriptions: the graphql-http audit suite, a graphql-sse client that subscribes
// and disposes, urql's and Apollo's queries again; then it prints "mix DONE".
import readline from 'node:readline';
import WebSocket from 'ws';
import { createClient as createWSClient } from 'graphql-ws';
import { createClient as createSSEClient } from 'graphql-sse';
import { auditServer } from 'graphql-http';
import stws from 'subscriptions-transport-ws';
import { ApolloClient, ApolloLink, HttpLink, InMemoryCache, gql } from '@apollo/client';
import { GraphQLWsLink } from '@apollo/client/link/subscriptions';
import { getMainDefinition } from '@apollo/client/utilities';
import { Client as UrqlClient, cacheExchange, fetchExchange, subscriptionExchange } from '@urql/core';

const { SubscriptionClient } = stws;
// A browser has WebSocket built in, and Apollo's GraphQLWsLink reads the global when a
// connection fails; Node 20 has none.
globalThis.WebSocket ??= WebSocket;
const [httpURL, wsURL, watcher] = process.argv.slice(2);

const subscription = `subscription($w: String) { staleNotices(watcher: $w) {
  watcher target targetAgentId changesSince notifiedVersion materialVersion text wake } }`;
const query = `query($k: String!) { sessionStatus(sessionKey: $k) { stateVersion } }`;
const mutation = `mutation($k: String!) { recordEvent(input: {sessionKey: $k, kind: run_completed, actorType: agent}) { stateVersion } }`;

const say = (name, what, rest = '') => console.log(`${name} ${what} ${Date.now()}${rest ? ' ' + rest : ''}`);
const fail = (name, e) => say(name, 'ERROR', JSON.stringify(e instanceof Error ? e.message : (e && e.message) || String(e)));
const notice = (name, result) => {
  if (result.errors && result.errors.length) return fail(name, JSON.stringify(result.errors));
  if (!result.data || !result.data.staleNotices) return fail(name, JSON.stringify(result));
  say(name, 'NOTICE', JSON.stringify(result.data.staleNotices));
};
const check = (name, what, result) => {
  if (result.errors && result.errors.length) throw new Error(`${what}: ${JSON.stringify(result.errors)}`);
  if (result.error) throw new Error(`${what}: ${result.error.message}`);
  if (!result.data) throw new Error(`${what}: no data`);
};
const sessionOf = (name) => `agent:main:e2e:${name}`;

// once runs one operation to its first result on a subscribe-style client.
const once = (subscribe) => new Promise((resolve, reject) => {
  let done = false;
  subscribe({
    next: (r) => { if (!done) { done = true; resolve(r); } },
    error: reject,
    complete: () => { if (!done) reject(new Error('completed without a result')); },
  });
});

// The query each HTTP client runs again for "mix".
const again = {};

async function apollo() {
  const name = 'apollo';
  const ws = new GraphQLWsLink(createWSClient({ url: wsURL, webSocketImpl: WebSocket }));
  const http = new HttpLink({ uri: httpURL });
  const link = ApolloLink.split(({ query: q }) => {
    const d = getMainDefinition(q);
    return d.kind === 'OperationDefinition' && d.operation === 'subscription';
  }, ws, http);
  const client = new ApolloClient({ link, cache: new InMemoryCache() });
  const k = sessionOf(name);
  check(name, 'mutation', await client.mutate({ mutation: gql(mutation), variables: { k } }));
  check(name, 'query', await client.query({ query: gql(query), variables: { k } }));
  again[name] = async () => check(name, 'query', await client.query({ query: gql(query), variables: { k }, fetchPolicy: 'network-only' }));
  client.subscribe({ query: gql(subscription), variables: { w: watcher } }).subscribe({
    next: (r) => (r.error ? fail(name, r.error) : notice(name, r)),
    error: (e) => fail(name, e),
  });
}

async function urql() {
  const name = 'urql';
  const ws = createWSClient({ url: wsURL, webSocketImpl: WebSocket });
  const client = new UrqlClient({
    url: httpURL,
    exchanges: [cacheExchange, fetchExchange, subscriptionExchange({
      // urql's documented glue for graphql-ws.
      forwardSubscription(request) {
        const input = { ...request, query: request.query || '' };
        return { subscribe(sink) { return { unsubscribe: ws.subscribe(input, sink) }; } };
      },
    })],
  });
  const k = sessionOf(name);
  check(name, 'mutation', await client.mutation(mutation, { k }).toPromise());
  check(name, 'query', await client.query(query, { k }).toPromise());
  again[name] = async () => check(name, 'query', await client.query(query, { k }, { requestPolicy: 'network-only' }).toPromise());
  client.subscription(subscription, { w: watcher }).subscribe((r) => (r.error ? fail(name, r.error) : notice(name, r)));
}

function graphqlWS(name, options) {
  return async () => {
    const client = createWSClient({ url: wsURL, webSocketImpl: WebSocket, ...options });
    const k = sessionOf(name);
    check(name, 'mutation', await once((s) => client.subscribe({ query: mutation, variables: { k } }, s)));
    check(name, 'query', await once((s) => client.subscribe({ query, variables: { k } }, s)));
    client.subscribe({ query: subscription, variables: { w: watcher } }, {
      next: (r) => notice(name, r), error: (e) => fail(name, e), complete: () => fail(name, 'completed'),
    });
  };
}

async function legacy() {
  const name = 'subscriptions-transport-ws';
  const client = new SubscriptionClient(wsURL, { reconnect: true }, WebSocket);
  const k = sessionOf(name);
  check(name, 'mutation', await once((s) => client.request({ query: mutation, variables: { k } }).subscribe(s)));
  check(name, 'query', await once((s) => client.request({ query, variables: { k } }).subscribe(s)));
  client.request({ query: subscription, variables: { w: watcher } }).subscribe({
    next: (r) => notice(name, r), error: (e) => fail(name, e), complete: () => fail(name, 'completed'),
  });
}

async function graphqlSSE() {
  const name = 'graphql-sse';
  const client = createSSEClient({ url: httpURL });
  const k = sessionOf(name);
  check(name, 'mutation', await once((s) => client.subscribe({ query: mutation, variables: { k } }, s)));
  check(name, 'query', await once((s) => client.subscribe({ query, variables: { k } }, s)));
  client.subscribe({ query: subscription, variables: { w: watcher } }, {
    next: (r) => notice(name, r), error: (e) => fail(name, e), complete: () => fail(name, 'completed'),
  });
}

// mix runs the audit, an SSE client that subscribes and disposes, and the HTTP
// clients' queries again; it reports what failed rather than throwing.
async function mix() {
  const out = { audit: null, errors: [] };
  const attempt = async (what, fn) => {
    try { await fn(); } catch (e) { out.errors.push(`${what}: ${e instanceof Error ? e.message : String(e)}`); }
  };
  await Promise.all([
    attempt('audit', async () => {
      const results = await auditServer({ url: httpURL });
      out.audit = { ok: results.filter((r) => r.status === 'ok').length, total: results.length };
    }),
    attempt('sse-dispose', async () => {
      const client = createSSEClient({ url: httpURL });
      await once((s) => client.subscribe({ query: subscription, variables: { w: watcher } }, s));
      client.dispose();
    }),
    ...Object.entries(again).map(([name, fn]) => attempt(name, fn)),
  ]);
  say('mix', 'DONE', JSON.stringify(out));
}

for (const [name, run] of [['apollo', apollo], ['urql', urql], ['graphql-ws', graphqlWS('graphql-ws', {})],
  ['graphql-ws-retry', graphqlWS('graphql-ws-retry', { shouldRetry: () => true })],
  ['subscriptions-transport-ws', legacy], ['graphql-sse', graphqlSSE]]) {
  run().then(() => say(name, 'READY'), (e) => fail(name, e));
}

readline.createInterface({ input: process.stdin }).on('line', (line) => {
  if (line.trim() === 'mix') mix();
});
