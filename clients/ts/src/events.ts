// The event feed: stateEventFeed of one session over graphql-transport-ws (graphql-ws)
// or Server-Sent Events (graphql-sse), resumed after the last sequence received on
// every reconnection (FEED-1, FEED-2), with the feed's markers (FEED-3).
import { createClient as createWsClient, type Client as WsClient } from 'graphql-ws';
import { createClient as createSseClient, NetworkError, type Client as SseClient } from 'graphql-sse';
import WebSocket from 'ws';
import { AwarenessError, Client } from './client.js';
import type { StateEvent, Target } from './reconcile.js';

/** One item of an EventFeed: an event, or a marker of the feed. */
export type FeedItem =
  /** The event after the last one handed out, always. */
  | { type: 'event'; event: StateEvent }
  /** The end of a (re)subscription's replay: every event up to lastSequence was handed out. */
  | { type: 'synced'; lastSequence: number; replayed: number; at: string }
  /** An idle feed's marker, at least every 30 s: every event up to lastSequence was handed out. */
  | { type: 'bookmark'; lastSequence: number; at: string };

export interface EventFeedOptions {
  /** Default 'websocket'. */
  transport?: 'websocket' | 'sse';
  /** Start after this sequence (its events come first); omitted: at the session's head, which the first 'synced' names. */
  afterSequence?: number;
  /** Bounds of the reconnect backoff (exponential with jitter; defaults 100 ms and 5 s). */
  minBackoffMs?: number;
  maxBackoffMs?: number;
}

const query = `subscription($k: String, $a: String, $after: Int) { stateEventFeed(sessionKey: $k, agentId: $a, afterSequence: $after) {
  __typename ... on StateEvent { sequence kind actorType actorId summary occurredAt runId payload }
  ... on FeedSynced { lastSequence replayed at } ... on FeedBookmark { lastSequence at } } }`;

type GqlError = { message: string; extensions?: { code?: string; retryAfterMs?: number; earliestAvailableSequence?: number } };
type Result = { data?: { stateEventFeed?: Record<string, unknown> } | null; errors?: readonly GqlError[] };

/**
 * Follows stateEventFeed of one session and resumes after the last sequence it handed
 * out whenever the connection is lost or the service drops or restarts it: with
 * afterSequence on a WebSocket, with Last-Event-ID over SSE. Iterate it (for await):
 * every event of the session once, in order, with the feed's markers between them. The
 * iteration ends with an AwarenessError when the service refuses the feed for good
 * (HISTORY_GAP with earliestAvailableSequence, CURSOR_AHEAD, FORBIDDEN …), and ends
 * quietly after close().
 */
export class EventFeed implements AsyncIterable<FeedItem> {
  readonly #client: Client;
  readonly #target: Target;
  readonly #opts: Required<Omit<EventFeedOptions, 'afterSequence'>>;
  #last: number | undefined;
  #closed = false;
  #abort = new AbortController();
  #ws: WsClient | null = null;
  #sse: SseClient | null = null;

  constructor(client: Client, target: Target, opts: EventFeedOptions = {}) {
    this.#client = client;
    this.#target = target;
    const min = opts.minBackoffMs ?? 100;
    this.#opts = { transport: opts.transport ?? 'websocket', minBackoffMs: min, maxBackoffMs: Math.max(opts.maxBackoffMs ?? 5000, min) };
    this.#last = opts.afterSequence;
  }

  /** The last sequence handed out (or started after); undefined before the feed knows one. */
  get lastSequence(): number | undefined { return this.#last; }

  /** Ends the feed: its connection closes and an iteration ends. Never rejects. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#abort.abort();
    const ws = this.#ws;
    this.#ws = null;
    this.#sse?.dispose();
    this.#sse = null;
    if (ws) await Promise.race([ws.dispose(), new Promise((r) => setTimeout(r, 1000).unref())]).catch(() => {});
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<FeedItem> {
    let delay = this.#opts.minBackoffMs;
    while (!this.#closed) {
      let retryAfter = 0;
      const results = this.#subscribe();
      try {
        for await (const r of results) {
          if (r.errors?.length) throw feedError(r.errors[0]);
          const item = this.#item(r.data?.stateEventFeed);
          delay = this.#opts.minBackoffMs;
          yield item;
        }
      } catch (e) {
        if (this.#closed) return;
        if (e instanceof AwarenessError) {
          if (e.permanent) throw e;
          retryAfter = e.retryAfterMs ?? 0;
        }
      } finally {
        await results.return?.(undefined);
      }
      if (this.#closed) return;
      const wait = Math.max(delay + Math.random() * delay / 2, retryAfter);
      delay = Math.min(2 * delay, this.#opts.maxBackoffMs);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, wait);
        this.#abort.signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
      });
    }
  }

  /** One subscription's results: on the WebSocket with afterSequence, over SSE with Last-Event-ID. */
  #subscribe(): AsyncIterableIterator<Result> {
    const variables: Record<string, unknown> = { k: this.#target.sessionKey };
    if (this.#target.agentId) variables.a = this.#target.agentId;
    const client = this.#client;
    if (this.#opts.transport === 'sse') {
      // The body stays the same on every (re)connection, as a graphql-sse client's own
      // retries send it; the header says where to resume, and the service takes it.
      this.#sse ??= createSseClient({
        url: client.endpoint,
        retryAttempts: 0,
        headers: () => ({ ...client.headers(), ...(this.#last !== undefined ? { 'Last-Event-ID': String(this.#last) } : {}) }),
      });
      return wrap(this.#sse.iterate<Record<string, unknown>>({ query, variables }) as AsyncIterableIterator<Result>, 'sse');
    }
    if (this.#last !== undefined) variables.after = this.#last;
    this.#ws ??= createWsClient({
      url: client.wsUrl,
      webSocketImpl: WebSocket,
      connectionParams: () => (client.authorization ? { Authorization: client.authorization } : {}),
      lazy: true,
      retryAttempts: 0,
      keepAlive: 15_000,
    });
    return wrap(this.#ws.iterate<Record<string, unknown>>({ query, variables }) as AsyncIterableIterator<Result>, 'websocket');
  }

  /** Decodes one item and checks it against the last sequence handed out. */
  #item(x: Record<string, unknown> | undefined): FeedItem {
    const last = this.#last;
    switch (x?.__typename) {
      case 'StateEvent': {
        const seq = Number(x.sequence);
        // The service never sends another (FEED-1); resubscribing resumes after the last.
        if (last !== undefined && seq !== last + 1) throw new Error(`awareness event feed: event ${seq} after ${last}`);
        this.#last = seq;
        const { __typename: _, ...event } = x;
        return { type: 'event', event: event as unknown as StateEvent };
      }
      case 'FeedSynced':
      case 'FeedBookmark': {
        const seq = x.lastSequence;
        if (typeof seq !== 'number' || (last !== undefined && seq !== last)) {
          throw new Error(`awareness event feed: ${x.__typename} at ${seq} after ${last}`);
        }
        this.#last = seq;
        return x.__typename === 'FeedSynced'
          ? { type: 'synced', lastSequence: seq, replayed: Number(x.replayed), at: String(x.at) }
          : { type: 'bookmark', lastSequence: seq, at: String(x.at) };
      }
    }
    throw new Error(`awareness event feed: an item ${JSON.stringify(x)}`);
  }
}

/** The AwarenessError of a refused feed, with HISTORY_GAP's earliest sequence. */
function feedError(e: GqlError): AwarenessError {
  const x = e.extensions ?? {};
  return new AwarenessError(e.message, x.code ?? '', 0, { retryAfterMs: x.retryAfterMs, earliestAvailableSequence: x.earliestAvailableSequence });
}

/**
 * The results of one subscription, with what ends it as an AwarenessError: the errors
 * of an `error` message, a refused SSE request's answer; a lost connection is an error
 * without a code (retried).
 */
async function* wrap(results: AsyncIterableIterator<Result>, transport: 'websocket' | 'sse'): AsyncGenerator<Result> {
  try {
    yield* results;
  } catch (e) {
    if (Array.isArray(e) && e.length) throw feedError(e[0] as GqlError);
    const res = e instanceof NetworkError ? (e.response as Response | undefined) : undefined;
    if (res) {
      let body: { errors?: GqlError[] } = {};
      try { body = JSON.parse(await res.text()); } catch { /* not a GraphQL answer */ }
      if (body.errors?.length) {
        const err = feedError(body.errors[0]!);
        throw new AwarenessError(err.detail, err.code, res.status, { retryAfterMs: err.retryAfterMs });
      }
      throw new AwarenessError(`stateEventFeed over SSE: HTTP ${res.status}`, '', res.status, { cause: e });
    }
    const code = typeof e === 'object' && e !== null && 'code' in e ? Number((e as { code: unknown }).code) : 0;
    if (code === 4401) throw new AwarenessError('the service refused the credentials (WebSocket close 4401)', 'UNAUTHENTICATED', 401, { cause: e });
    if (code === 4403) throw new AwarenessError('the service refused the connection (WebSocket close 4403)', 'FORBIDDEN', 403, { cause: e });
    throw new AwarenessError(`stateEventFeed over ${transport}: the connection was lost`, '', 0, { cause: e });
  }
}
