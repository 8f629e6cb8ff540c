// A third-party GraphQL-over-WebSocket client for the end-to-end tests.
//
//   node subscribe.mjs <ws-url> <transport|legacy> <watcher> <count> [timeoutMs] [token]
//
// It subscribes to staleNotices(watcher) with the npm graphql-ws client over the
// graphql-transport-ws subprotocol ("transport"), or with subscriptions-transport-ws
// over the legacy graphql-ws subprotocol ("legacy"). It prints "READY" once the
// connection is acknowledged, then one JSON line per notice, and exits 0 after <count>
// notices, 3 on timeout, 1 on error.
import WebSocket from 'ws';
import { createClient } from 'graphql-ws';
import pkg from 'subscriptions-transport-ws';
const { SubscriptionClient } = pkg;

const [url, protocol, watcher, countArg, timeoutArg, token] = process.argv.slice(2);
const want = Number(countArg || 1);
const timeoutMs = Number(timeoutArg || 10000);
const query = `subscription($w: String) { staleNotices(watcher: $w) {
  watcher target targetAgentId changesSince notifiedVersion materialVersion text wake openedAt } }`;
const connectionParams = token ? { Authorization: `Bearer ${token}` } : {};

let got = 0;
const timer = setTimeout(() => { console.error(`timeout after ${got} notices`); process.exit(3); }, timeoutMs);
const onNotice = (result) => {
  if (result.errors) { console.error(JSON.stringify(result.errors)); process.exit(1); }
  console.log(JSON.stringify(result.data.staleNotices));
  got++;
  if (got >= want) { clearTimeout(timer); setTimeout(() => process.exit(0), 50); }
};

if (protocol === 'transport') {
  const client = createClient({
    url, webSocketImpl: WebSocket, connectionParams, retryAttempts: 0,
    on: { connected: () => console.log('READY') },
  });
  client.subscribe({ query, variables: { w: watcher } }, {
    next: onNotice,
    error: (e) => { console.error('error', e instanceof Error ? e.message : JSON.stringify(e)); process.exit(1); },
    complete: () => { if (got < want) { console.error('completed early'); process.exit(1); } },
  });
} else if (protocol === 'legacy') {
  const client = new SubscriptionClient(url, { reconnect: false, connectionParams }, WebSocket);
  client.onConnected(() => console.log('READY'));
  client.onError((e) => { console.error('error', e && e.message); process.exit(1); });
  client.request({ query, variables: { w: watcher } }).subscribe({
    next: onNotice,
    error: (e) => { console.error('error', JSON.stringify(e)); process.exit(1); },
  });
} else {
  console.error('protocol must be transport or legacy');
  process.exit(2);
}
