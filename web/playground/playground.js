// Starts GraphiQL against this server's /query endpoint: HTTP for queries and
// mutations, graphql-transport-ws (the vendored graphql-ws client) for subscriptions.
// Everything is served by the service itself, so it works with no internet access.
// ?query=… (and ?variables=…) preload the editor, as in the usual GraphiQL links.
(function () {
  'use strict';
  var params = new URLSearchParams(window.location.search);
  var wsURL = (window.location.protocol === 'https:' ? 'wss://' : 'ws://') + window.location.host + '/query';
  var wsClient = window.graphqlWs.createClient({
    url: wsURL,
    lazy: true,
    retryAttempts: 5,
    shouldRetry: function () { return true; },
  });
  var fetcher = window.GraphiQL.createFetcher({
    url: window.location.origin + '/query',
    wsClient: wsClient,
  });
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
