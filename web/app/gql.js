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

// Bearer token for a server started with --auth-file, kept in localStorage. Without an
// auth file the server needs none and the dashboard never asks.
const TOKEN_KEY = 'awareness.token';
let tokenDeclined = false;

/** authToken returns the stored bearer token, or ''. */
export function authToken() {
  try { return localStorage.getItem(TOKEN_KEY) || ''; } catch { return ''; }
}

/** askToken asks the person for a token once per page load and stores it. */
function askToken() {
  if (tokenDeclined) return false;
  const t = (window.prompt('This server needs an access token (a token of its --auth-file):') || '').trim();
  if (!t) { tokenDeclined = true; return false; }
  try { localStorage.setItem(TOKEN_KEY, t); } catch { /* private mode: keep it for this call only */ }
  return true;
}

/**
 * gql runs one operation and resolves with its data. Any GraphQL error rejects with a
 * GraphQLRequestError (even with partial data): the dashboard never shows half an answer
 * as if it were whole.
 */
export async function gql(query, variables = {}, { signal } = {}, retried = false) {
  let res;
  const headers = { 'Content-Type': 'application/json', Accept: 'application/json' };
  if (authToken()) headers.Authorization = `Bearer ${authToken()}`;
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
  if (res.status === 401 && !retried && askToken()) return gql(query, variables, { signal }, true);
  let body;
  try {
    body = await res.json();
  } catch {
    throw new GraphQLRequestError([{ message: `unexpected response (HTTP ${res.status})` }], res.status);
  }
  if (body.errors && body.errors.length) throw new GraphQLRequestError(body.errors, res.status);
  if (!res.ok || !body.data) throw new GraphQLRequestError([{ message: `HTTP ${res.status}` }], res.status);
  return body.data;
}

/** errorText is a one-line explanation of err for a person. */
export function errorText(err) {
  if (!err) return '';
  if (err instanceof NetworkError) return 'The server cannot be reached; it will be retried.';
  if (err instanceof GraphQLRequestError) return err.code ? `${err.message} (${err.code})` : err.message;
  if (Array.isArray(err)) return err.map((e) => e.message).join('; ');
  return err.message || String(err);
}

// Shared selections.
export const NOTICE_FIELDS = 'watcher target targetAgentId changesSince notifiedVersion materialVersion text wake openedAt';
export const EVENT_FIELDS = 'sequence kind actorType actorId summary occurredAt runId payload';
export const CURSOR_FIELDS = 'watcher target targetAgentId lastAcked notified material pending updatedAt';
export const SESSION_FIELDS = 'sessionKey agentId kind displayName updatedAt stateVersion';
