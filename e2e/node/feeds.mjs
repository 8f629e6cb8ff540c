// Third-party GraphQL clients following stateEventFeed (FEED-1..3), each with its
// default options, for e2e/feeds_test.go.
//
//   node feeds.mjs <http-url> <ws-url> <sessionKey>
//
// Each client subscribes to stateEventFeed(sessionKey, afterSequence: 0), selecting
// the union's members with inline fragments and __typename, and prints every item it
// receives, one line each (times in ms since the epoch):
//
//   <client> ITEM <t> <json>       {"typename":…,"sequence":…} for an event,
//                                  {"typename":…,"lastSequence":…} for a marker
//   <client> ERROR <t> <message>   the client reported an error (it gave up)
//
// Clients: apollo (Apollo Client 4, GraphQLWsLink over graphql-ws, InMemoryCache
// without possibleTypes), urql (subscriptionExchange over graphql-ws), graphql-ws,
// graphql-sse. Two of them resume after a lost connection as the README shows, with
// nothing but their own options: graphql-sse sends Last-Event-ID from a headers
// function (its retries send the same body), and graphql-ws keeps the subscribe
// payload and moves its afterSequence (its retries send the payload as it is then).
// Apollo and urql resubscribe with the variables they were given, so after a
// reconnection they receive the replay again, which a client drops by sequence.
import WebSocket from 'ws';
import { createClient as createWSClient } from 'graphql-ws';
import { createClient as createSSEClient } from 'graphql-sse';
import { ApolloClient, ApolloLink, HttpLink, InMemoryCache, gql } from '@apollo/client';
import { GraphQLWsLink } from '@apollo/client/link/subscriptions';
import { getMainDefinition } from '@apollo/client/utilities';
import { Client as UrqlClient, cacheExchange, fetchExchange, subscriptionExchange } from '@urql/core';

globalThis.WebSocket ??= WebSocket;
const [httpURL, wsURL, sessionKey] = process.argv.slice(2);

const feed = `subscription($k: String, $a: Int) { stateEventFeed(sessionKey: $k, afterSequence: $a) {
  __typename
  ... on StateEvent { sequence kind }
  ... on FeedSynced { lastSequence replayed }
  ... on FeedBookmark { lastSequence at } } }`;

const say = (name, what, rest) => console.log(`${name} ${what} ${Date.now()} ${rest}`);
const fail = (name, e) => say(name, 'ERROR', JSON.stringify(e instanceof Error ? e.message : (e && e.message) || String(e)));
// item prints one result and returns its event's sequence (0 for a marker).
const item = (name, result) => {
  if (result.errors && result.errors.length) { fail(name, JSON.stringify(result.errors)); return 0; }
  const it = result.data && result.data.stateEventFeed;
  if (!it || !it.__typename) { fail(name, JSON.stringify(result)); return 0; }
  const out = { typename: it.__typename };
  if (it.__typename === 'StateEvent') out.sequence = it.sequence;
  else out.lastSequence = it.lastSequence;
  say(name, 'ITEM', JSON.stringify(out));
  return out.sequence || 0;
};

function apollo() {
  const name = 'apollo';
  const ws = new GraphQLWsLink(createWSClient({ url: wsURL, webSocketImpl: WebSocket }));
  const link = ApolloLink.split(({ query: q }) => {
    const d = getMainDefinition(q);
    return d.kind === 'OperationDefinition' && d.operation === 'subscription';
  }, ws, new HttpLink({ uri: httpURL }));
  const client = new ApolloClient({ link, cache: new InMemoryCache() });
  client.subscribe({ query: gql(feed), variables: { k: sessionKey, a: 0 } }).subscribe({
    next: (r) => (r.error ? fail(name, r.error) : item(name, r)),
    error: (e) => fail(name, e),
  });
}

function urql() {
  const name = 'urql';
  const ws = createWSClient({ url: wsURL, webSocketImpl: WebSocket });
  const client = new UrqlClient({
    url: httpURL,
    exchanges: [cacheExchange, fetchExchange, subscriptionExchange({
      forwardSubscription(request) {
        const input = { ...request, query: request.query || '' };
        return { subscribe(sink) { return { unsubscribe: ws.subscribe(input, sink) }; } };
      },
    })],
  });
  client.subscription(feed, { k: sessionKey, a: 0 }).subscribe((r) => (r.error ? fail(name, r.error) : item(name, r)));
}

function graphqlWS() {
  const name = 'graphql-ws';
  const client = createWSClient({ url: wsURL, webSocketImpl: WebSocket });
  // The payload graphql-ws sends again on each retry: its afterSequence follows the
  // events received, so a retry resumes.
  const payload = { query: feed, variables: { k: sessionKey, a: 0 } };
  client.subscribe(payload, {
    next: (r) => {
      const seq = item(name, r);
      if (seq > payload.variables.a) payload.variables.a = seq;
    },
    error: (e) => fail(name, e),
    complete: () => fail(name, 'completed'),
  });
}

function graphqlSSE() {
  const name = 'graphql-sse';
  let last = 0;
  // Each (re)connection asks for the events after the last one received: its
  // Last-Event-ID wins over the body's afterSequence.
  const client = createSSEClient({ url: httpURL, headers: () => (last ? { 'Last-Event-ID': String(last) } : {}) });
  client.subscribe({ query: feed, variables: { k: sessionKey, a: 0 } }, {
    next: (r) => {
      const seq = item(name, r);
      if (seq > last) last = seq;
    },
    error: (e) => fail(name, e),
    complete: () => fail(name, 'completed'),
  });
}

for (const [name, run] of [['apollo', apollo], ['urql', urql], ['graphql-ws', graphqlWS], ['graphql-sse', graphqlSSE]]) {
  try { run(); } catch (e) { fail(name, e); }
}
