// Starts GraphiQL against this server's /query endpoint: HTTP for queries and
// mutations, graphql-transport-ws (the vendored graphql-ws client) for subscriptions.
// Everything is served by the service itself, so it works with no internet access.
// ?query=… (and ?variables=…) preload the editor, as in the usual GraphiQL links.
//
// Under --auth-file the WebSocket needs the token in connection_init: the playground
// sends the Headers pane's Authorization when it has one, else the token the
// dashboard stored (localStorage, the key of web/app/gql.js), as {Authorization:
// "Bearer …"}. A change of the Headers pane's Authorization reconnects the socket
// with the new one. Queries and mutations send the Headers pane's headers, else the
// stored token, over HTTP.
(function () {
  'use strict';
  var TOKEN_KEY = 'awareness.token';
  var params = new URLSearchParams(window.location.search);
  var wsURL = (window.location.protocol === 'https:' ? 'wss://' : 'ws://') + window.location.host + '/query';
  var paneAuth = '';
  function storedAuth() {
    try {
      var t = localStorage.getItem(TOKEN_KEY) || '';
      return t ? 'Bearer ' + t : '';
    } catch (e) { return ''; }
  }
  function auth() { return paneAuth || storedAuth(); }
  var wsClient = window.graphqlWs.createClient({
    url: wsURL,
    lazy: true,
    retryAttempts: 5,
    shouldRetry: function () { return true; },
    connectionParams: function () { var a = auth(); return a ? { Authorization: a } : {}; },
  });
  var inner = window.GraphiQL.createFetcher({
    url: window.location.origin + '/query',
    wsClient: wsClient,
  });
  function fetcher(graphQLParams, opts) {
    var headers = Object.assign({}, (opts && opts.headers) || {});
    var a = headers.Authorization || headers.authorization || '';
    if (a !== paneAuth) {
      paneAuth = a;
      wsClient.terminate(); // reconnects with the new connection_init payload
    }
    if (!a && storedAuth()) headers.Authorization = storedAuth();
    return Promise.resolve(inner(graphQLParams, Object.assign({}, opts, { headers: headers }))).then(everyPayload);
  }

  // everyPayload makes a subscription show every payload it received, not only the
  // last (GraphiQL replaces the response with each one): from the second payload on
  // the response pane shows {"received": n, "payloads": [newest … oldest]}, at most
  // KEEP of them. Anything that is not a stream passes through.
  var KEEP = 100;
  function everyPayload(result) {
    if (!result || typeof result[Symbol.asyncIterator] !== 'function') return result;
    var all = [];
    var received = 0;
    return {
      [Symbol.asyncIterator]: function () {
        var it = result[Symbol.asyncIterator]();
        return {
          next: function () {
            return it.next().then(function (step) {
              if (step.done) return step;
              received++;
              all.unshift(step.value);
              if (all.length > KEEP) all.pop();
              return { done: false, value: received === 1 ? step.value : { received: received, payloads: all.slice() } };
            });
          },
          return: function () { return it.return ? it.return() : Promise.resolve({ done: true }); },
        };
      },
    };
  }
  var defaultQuery = [
    '# Session state awareness: try a query, a mutation or a subscription.',
    '#',
    '# subscription { staleNotices { watcher target changesSince text wake } }',
    '',
    '{',
    '  sessionsList(first: 20) {',
    '    sessions { sessionKey agentId kind stateVersion updatedAt }',
    '    pageInfo { hasNextPage endCursor }',
    '  }',
    '}',
    '',
  ].join('\n');
  var props = {
    fetcher: fetcher,
    defaultQuery: defaultQuery,
    shouldPersistHeaders: false,
    defaultEditorToolsVisibility: params.has('variables'),
  };
  if (params.has('query')) props.query = params.get('query');
  if (params.has('variables')) props.variables = params.get('variables');
  var root = window.ReactDOM.createRoot(document.getElementById('graphiql'));
  root.render(window.React.createElement(window.GraphiQL, props));
})();
