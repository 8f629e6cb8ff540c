// GraphQL over HTTP: queries and mutations go to POST /query on this origin.

/** GraphQLRequestError carries the GraphQL errors of a response; code is extensions.code. */
export class GraphQLRequestError extends Error {
  constructor(errors, status) {
    super(errors.map((e) => e.message).join('; ') || `HTTP ${status}`);
    this.name = 'GraphQLRequestError';
    this.errors = errors;
    this.status = status;
    this.code = (errors[0] && errors[0].extensions && errors[0].extensions.code) || null;
  }
}

/** NetworkError means the server could not be reached. */
export class NetworkError extends Error {
  constructor(cause) {
    super('the server cannot be reached');
    this.name = 'NetworkError';
    this.cause = cause;
  }
}

/** isAuthError reports a refusal for want of a (valid, sufficient) token. */
export function isAuthError(err) {
  return err instanceof GraphQLRequestError && (err.code === 'UNAUTHENTICATED' || err.code === 'FORBIDDEN');
}

// The page's Auth (auth.js), set once by app.js; null: no token handling.
let auth = null;

/** useAuth wires the token dialog into every request. */
export function useAuth(a) { auth = a; }

/** authToken returns the stored bearer token, or ''. */
export function authToken() {
  return auth ? auth.token() : '';
}

/**
 * gql runs one operation and resolves with its data. Any GraphQL error rejects with a
 * GraphQLRequestError (even with partial data): the dashboard never shows half an answer
 * as if it were whole. A 401 waits for the one token dialog and, when a token was
 * entered, runs the operation again; with quiet it rejects instead (a background read
 * that must not be the one to ask for a token).
 */
export async function gql(query, variables = {}, { signal, quiet = false } = {}, retried = 0) {
  let res;
  // X-Awareness-Client names the dashboard in the acknowledgement history.
  const headers = { 'Content-Type': 'application/json', Accept: 'application/json', 'X-Awareness-Client': 'awareness-dashboard' };
  const token = authToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  try {
    res = await fetch('/query', {
      method: 'POST',
      headers,
      body: JSON.stringify({ query, variables }),
      signal,
    });
  } catch (err) {
    if (err && err.name === 'AbortError') throw err;
    throw new NetworkError(err);
  }
  if (res.status === 401 && auth && retried < 3 && !quiet) {
    // A token entered meanwhile (another request's dialog) is tried before asking.
    if (authToken() !== token && authToken()) return gql(query, variables, { signal }, retried + 1);
    if (await auth.refused()) return gql(query, variables, { signal }, retried + 1);
  }
  let body;
  try {
    body = await res.json();
  } catch {
    throw new GraphQLRequestError([{ message: `unexpected response (HTTP ${res.status})` }], res.status);
  }
  if (res.status !== 401 && auth && token) auth.ok();
  if (body.errors && body.errors.length) throw new GraphQLRequestError(body.errors, res.status);
  if (!res.ok || !body.data) throw new GraphQLRequestError([{ message: `HTTP ${res.status}` }], res.status);
  return body.data;
}

/** errorText is a one-line explanation of err for a person. */
export function errorText(err) {
  if (!err) return '';
  if (err instanceof NetworkError) return 'The server cannot be reached.';
  if (err instanceof GraphQLRequestError) {
    if (err.code === 'UNAUTHENTICATED') return 'Not authorised: this server needs an access token (use the Token button).';
    if (err.code === 'FORBIDDEN') return `Not authorised: ${err.message}`;
    return err.code ? `${err.message} (${err.code})` : err.message;
  }
  if (Array.isArray(err)) {
    const codes = err.map((e) => e.extensions && e.extensions.code);
    if (codes.includes('UNAUTHENTICATED') || codes.includes('FORBIDDEN')) return `Not authorised: ${err.map((e) => e.message).join('; ')}`;
    return err.map((e) => e.message).join('; ');
  }
  return err.message || String(err);
}

// Shared selections.
export const NOTICE_FIELDS = 'watcher target targetAgentId changesSince notifiedVersion materialVersion text wake openedAt targetGeneration watcherGeneration';
export const EVENT_FIELDS = 'sequence kind actorType actorId summary occurredAt runId payload';
export const CURSOR_FIELDS = 'watcher target targetAgentId lastAcked notified material pending updatedAt';
export const SESSION_FIELDS = 'sessionKey agentId kind displayName updatedAt stateVersion';
