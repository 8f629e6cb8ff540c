// The GraphQL-over-HTTP client of the awareness service, with a typed call for each
// operation a gateway makes.

/** Error codes of the service (extensions.code, ERR-1) that the client acts on. */
export const Codes = {
  InvalidArgument: 'INVALID_ARGUMENT',
  NotFound: 'NOT_FOUND',
  CursorAhead: 'CURSOR_AHEAD',
  HistoryGap: 'HISTORY_GAP',
  Unauthenticated: 'UNAUTHENTICATED',
  Forbidden: 'FORBIDDEN',
  Unavailable: 'UNAVAILABLE',
  Internal: 'INTERNAL',
  RateLimited: 'RATE_LIMITED',
  ComplexityLimitExceeded: 'COMPLEXITY_LIMIT_EXCEEDED',
  /** An exact acknowledgement of notices drained by an earlier generation of the watcher (LIF-2): nothing was acknowledged. */
  StaleGeneration: 'STALE_GENERATION',
} as const;

/** An answer of the service that refused the request, or a request that got no answer (code ''). */
export class AwarenessError extends Error {
  /** With RATE_LIMITED: how long to wait before the next try. */
  readonly retryAfterMs?: number;
  /** With HISTORY_GAP: the oldest sequence the session's log still holds (FEED-1). */
  readonly earliestAvailableSequence?: number;
  /** The message without its prefix: the service's own words for an answer. */
  readonly detail: string;
  constructor(message: string, readonly code: string, readonly status: number,
    opts: { retryAfterMs?: number; earliestAvailableSequence?: number; cause?: unknown } = {}) {
    super(code ? `awareness: ${code}: ${message}` : `awareness: ${message}`, { cause: opts.cause });
    this.name = 'AwarenessError';
    this.detail = message;
    if (opts.retryAfterMs !== undefined) this.retryAfterMs = opts.retryAfterMs;
    if (opts.earliestAvailableSequence !== undefined) this.earliestAvailableSequence = opts.earliestAvailableSequence;
  }
  /** Retrying the same request cannot change the answer (invalid, forbidden, unauthenticated …). */
  get permanent(): boolean {
    if (this.code === Codes.Unavailable || this.code === Codes.Internal || this.code === Codes.RateLimited) return false;
    if (this.code === '') return this.status > 0 && this.status < 500 && this.status !== 408 && this.status !== 429;
    return true;
  }
  /** The service does not accept the credentials (a missing, wrong or revoked token). */
  get unauthenticated(): boolean { return this.code === Codes.Unauthenticated || (this.code === '' && this.status === 401); }
}

/** A logger: console works, and so does any object with these methods. */
export interface Logger {
  debug(msg: string, ...args: unknown[]): void;
  info(msg: string, ...args: unknown[]): void;
  warn(msg: string, ...args: unknown[]): void;
  error(msg: string, ...args: unknown[]): void;
}

const silent: Logger = { debug() {}, info() {}, warn() {}, error() {} };

export interface ClientOptions {
  /** Sent as "Authorization: Bearer <token>" on HTTP and SSE, and in the WebSocket connection_init payload. */
  token?: string;
  /** Bounds one HTTP request (default 10 s). */
  timeoutMs?: number;
  logger?: Logger;
}

/** A stale notice (the GraphQL StaleNotice, NTC-1..7). */
export interface Notice {
  watcher: string;
  target: string;
  targetAgentId: string;
  /** L: where the watcher reconciles from. */
  changesSince: number;
  /** N: what acknowledging this notice covers. */
  notifiedVersion: number;
  materialVersion: number;
  /** The exact line to put into the watcher's prompt (NTC-1). */
  text: string;
  /** Run the watcher's turn now (a main session, NTC-6). */
  wake: boolean;
  openedAt: string;
  /** The target's generation (1, one more per reset) the notice was opened for (LIF-2). */
  targetGeneration: number;
  /** The watcher's generation the notice was opened for (LIF-2); acknowledgeNotices names it. */
  watcherGeneration: number;
  /** Set on the item that tells the notice was acknowledged or removed. */
  closed?: boolean;
  /** RDL-1: set on a notice that came back after a drain (drainNotices) neither acknowledged nor released. */
  redelivered?: boolean;
  /** RDL-1, RDL-2: how many times the service handed this notice out again (a redelivery, the end of a snooze). */
  delivery?: number;
  /** DIG-1: what changed between changesSince and notifiedVersion, without content (pendingDigests only). */
  digest?: NoticeDigest;
}

/** A notice's digest (DIG-1): the events of (changesSince, notifiedVersion] counted; counted + pruned = N − L. */
export interface NoticeDigest {
  byKind: { kind: string; count: number }[];
  byActorType: { actorType: string; count: number }[];
  humanEvents: number;
  lastHumanChannel: string | null;
  latestVersion: number;
  counted: number;
  pruned: number;
}

/** One notice to acknowledge: as the notice names it (NTC-3). */
export interface NoticeRef {
  target: string;
  targetAgentId?: string;
  notifiedVersion: number;
  /** The watcher's generation the notice was drained in (LIF-2): an earlier one than the watcher's is refused with STALE_GENERATION. */
  watcherGeneration?: number;
}

/** What acknowledgeNotices did with one named notice (the GraphQL AckOutcome, NTC-3). */
export type AckOutcome = 'acknowledged' | 'alreadyAcknowledged' | 'superseded' | 'notPending';

/** The answer of acknowledgeNotices for one NoticeRef (the GraphQL NoticeAck). */
export interface NoticeAck {
  watcher: string;
  target: string;
  targetAgentId: string;
  notifiedVersion: number;
  outcome: AckOutcome;
  /** With acknowledged: the follow-up notice that opened for the changes after it (NTC-3), if any. */
  followUp: Notice | null;
  /** With alreadyAcknowledged or superseded: the pair's pending notice now, if any. */
  pending: Notice | null;
  /** RDL-2: set on the answer of dismissNotice. */
  dismissed?: boolean;
}

/** A (watcher, target) cursor (the GraphQL WatchCursor, WAT-1). */
export interface WatchCursor {
  watcher: string;
  target: string;
  targetAgentId: string;
  lastAcked: number;
  notified: number;
  material: number;
  pending: boolean;
  updatedAt: string;
}

/** What watch did (the GraphQL WatchResult, WAT-3). */
export interface WatchResult {
  watched: boolean;
  /** Why not, when watched is false. */
  reason: string | null;
  cursor: WatchCursor | null;
}

/** What one append did (the GraphQL RecordEventResult). */
export interface RecordEventResult {
  /** False when the service had the event already (SIG-4). */
  recorded: boolean;
  event: { sequence: number };
  stateVersion: number;
  noticesOpened: number;
  skippedWatchers: { watcher: string; reason: string }[];
}

/** One input of recordEvents: what its append did, or why it was refused. */
export interface RecordEventsItem {
  index: number;
  result: RecordEventResult | null;
  error: { code: string; message: string } | null;
}

export const NOTICE_FIELDS = 'watcher target targetAgentId changesSince notifiedVersion materialVersion text wake openedAt targetGeneration watcherGeneration redelivered delivery';
const DIGEST_FIELDS = 'digest { byKind { kind count } byActorType { actorType count } humanEvents lastHumanChannel latestVersion counted pruned }';
const CURSOR_FIELDS = 'watcher target targetAgentId lastAcked notified material pending updatedAt';
const RESULT_FIELDS = 'recorded stateVersion noticesOpened event { sequence } skippedWatchers { watcher reason }';

const watchMutation = `mutation($in: WatchInput!) { watch(input: $in) { watched reason cursor { ${CURSOR_FIELDS} } } }`;
const unwatchMutation = `mutation($w: String!, $t: String!, $a: String) { unwatch(watcher: $w, target: $t, targetAgentId: $a) }`;
const pendingQuery = `query($w: String!) { pendingNotices(watcher: $w) { ${NOTICE_FIELDS} } }`;
const acknowledgeMutation = `mutation($w: String!, $n: [NoticeRef!]!) { acknowledgeNotices(watcher: $w, notices: $n) {
  watcher target targetAgentId notifiedVersion outcome followUp { ${NOTICE_FIELDS} } pending { ${NOTICE_FIELDS} } } }`;
const pendingDigestsQuery = `query($w: String!) { pendingNotices(watcher: $w) { ${NOTICE_FIELDS} ${DIGEST_FIELDS} } }`;
const drainMutation = `mutation($w: String!) { drainNotices(watcher: $w) { ${NOTICE_FIELDS} } }`;
const releaseMutation = `mutation($w: String!, $n: [NoticeRef!]!) { releaseNotices(watcher: $w, notices: $n) { ${NOTICE_FIELDS} } }`;
const snoozeMutation = `mutation($w: String!, $t: String!, $a: String, $v: Int!, $u: Time!) {
  snoozeNotice(watcher: $w, target: $t, targetAgentId: $a, notifiedVersion: $v, until: $u) { ${NOTICE_FIELDS} } }`;
const dismissMutation = `mutation($w: String!, $t: String!, $a: String, $v: Int!) {
  dismissNotice(watcher: $w, target: $t, targetAgentId: $a, notifiedVersion: $v) {
  watcher target targetAgentId notifiedVersion outcome dismissed followUp { ${NOTICE_FIELDS} } pending { ${NOTICE_FIELDS} } } }`;
const recordMutation = `mutation($in: RecordEventInput!) { recordEvent(input: $in) { ${RESULT_FIELDS} } }`;
const recordEventsMutation = `mutation($in: [RecordEventInput!]!) { recordEvents(inputs: $in) { index result { ${RESULT_FIELDS} } error { code message } } }`;

/** The most inputs one recordEvents call takes. */
export const MAX_BATCH = 200;

/** Talks to one awareness service; holds no timer or socket of its own. */
export class Client {
  readonly endpoint: string;
  readonly wsUrl: string;
  readonly timeoutMs: number;
  readonly log: Logger;
  #authorization: string;

  /** endpoint: the service's GraphQL endpoint, e.g. http://127.0.0.1:8080/query. */
  constructor(endpoint: string, opts: ClientOptions = {}) {
    const u = new URL(endpoint);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error(`awareness client: endpoint ${endpoint}: want http(s)://host:port/query`);
    if (u.pathname === '' || u.pathname === '/') u.pathname = '/query';
    this.endpoint = u.toString();
    const ws = new URL(this.endpoint);
    ws.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
    this.wsUrl = ws.toString();
    this.#authorization = opts.token ? `Bearer ${opts.token}` : '';
    this.timeoutMs = opts.timeoutMs ?? 10_000;
    this.log = opts.logger ?? silent;
  }

  /** The Authorization header value ('' without a token). */
  get authorization(): string { return this.#authorization; }

  /** Replaces the token: later requests, and the Watcher's next connection, use it. */
  setToken(token: string | undefined): void { this.#authorization = token ? `Bearer ${token}` : ''; }

  /** The headers of a request to the service. */
  headers(): Record<string, string> {
    return this.#authorization ? { Authorization: this.#authorization } : {};
  }

  /**
   * Runs one GraphQL operation and returns its data. An answer with errors throws its
   * first as an AwarenessError (with retryAfterMs for RATE_LIMITED); no answer (the
   * service unreachable, the timeout) throws an AwarenessError with code ''.
   */
  async request<T = any>(query: string, variables: Record<string, unknown> = {}, signal?: AbortSignal): Promise<T> {
    const timeout = AbortSignal.timeout(this.timeoutMs);
    let res: Response, text: string;
    try {
      res = await fetch(this.endpoint, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Accept: 'application/json', ...this.headers() },
        body: JSON.stringify({ query, variables }),
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      });
      text = await res.text();
    } catch (e) {
      if (signal?.aborted) throw e;
      throw new AwarenessError(`no answer from ${this.endpoint}: ${(e as Error)?.cause ?? e}`, '', 0, { cause: e });
    }
    let body: { data?: T; errors?: { message: string; extensions?: { code?: string; retryAfterMs?: number } }[] };
    try {
      body = JSON.parse(text);
    } catch {
      throw new AwarenessError(`HTTP ${res.status} with a body that is not a GraphQL answer`, '', res.status);
    }
    if (body.errors?.length) {
      const e = body.errors[0];
      throw new AwarenessError(e.message, e.extensions?.code ?? '', res.status, { retryAfterMs: e.extensions?.retryAfterMs });
    }
    if (!res.ok) throw new AwarenessError(`HTTP ${res.status}`, '', res.status);
    return body.data as T;
  }

  /** Starts watching target from its current version (WAT-3); watched is false, with a reason, when the pair cannot watch. */
  async watch(watcher: string, target: string, targetAgentId?: string): Promise<WatchResult> {
    return (await this.request(watchMutation, { in: { watcher, target, targetAgentId } })).watch;
  }

  /** Stops watching (WAT-5); true when a cursor was removed. */
  async unwatch(watcher: string, target: string, targetAgentId?: string): Promise<boolean> {
    return (await this.request(unwatchMutation, { w: watcher, t: target, a: targetAgentId })).unwatch;
  }

  /** The watcher's pending notices, without acknowledging them (NTC-7). */
  async pendingNotices(watcher: string, signal?: AbortSignal): Promise<Notice[]> {
    return (await this.request(pendingQuery, { w: watcher }, signal)).pendingNotices;
  }

  /**
   * Acknowledges exactly the named notices of one watcher, each only while it is still
   * its pair's pending notice, and answers what it did with each (NTC-3). A Watcher's
   * ack() calls this and keeps its own state in step; call it directly only for
   * notices no Watcher holds.
   */
  async acknowledgeNotices(watcher: string, notices: NoticeRef[], signal?: AbortSignal): Promise<NoticeAck[]> {
    const n = notices.map((r) => ({
      target: r.target, targetAgentId: r.targetAgentId, notifiedVersion: r.notifiedVersion,
      ...(r.watcherGeneration ? { watcherGeneration: r.watcherGeneration } : {}),
    }));
    return (await this.request(acknowledgeMutation, { w: watcher, n }, signal)).acknowledgeNotices;
  }

  /** The watcher's pending notices with each one's digest (DIG-1), read from the log by the service. */
  async pendingDigests(watcher: string, signal?: AbortSignal): Promise<Notice[]> {
    return (await this.request(pendingDigestsQuery, { w: watcher }, signal)).pendingNotices;
  }

  /**
   * A turn's drain on the service (RDL-1): the pending notices neither snoozed nor held, with the drain
   * recorded. One then neither acknowledged nor released comes back, marked redelivered, after the
   * service's --redeliver-turns later turns of the watcher or --redeliver-after, whichever comes first.
   */
  async drainNotices(watcher: string, signal?: AbortSignal): Promise<Notice[]> {
    return (await this.request(drainMutation, { w: watcher }, signal)).drainNotices;
  }

  /** Hands drained notices back (RDL-1): the next drainNotices hands them out, not as redeliveries. */
  async releaseNotices(watcher: string, notices: NoticeRef[], signal?: AbortSignal): Promise<Notice[]> {
    const n = notices.map((r) => ({ target: r.target, targetAgentId: r.targetAgentId, notifiedVersion: r.notifiedVersion }));
    return (await this.request(releaseMutation, { w: watcher, n }, signal)).releaseNotices;
  }

  /** Hides a pending notice until `until`, then the service delivers it again (RDL-2). */
  async snoozeNotice(watcher: string, notice: NoticeRef, until: Date, signal?: AbortSignal): Promise<Notice> {
    return (await this.request(snoozeMutation, { w: watcher, t: notice.target, a: notice.targetAgentId, v: notice.notifiedVersion, u: until.toISOString() }, signal)).snoozeNotice;
  }

  /** Acknowledges a pending notice without reconciling (RDL-2); the answer has dismissed: true. */
  async dismissNotice(watcher: string, notice: NoticeRef, signal?: AbortSignal): Promise<NoticeAck> {
    return (await this.request(dismissMutation, { w: watcher, t: notice.target, a: notice.targetAgentId, v: notice.notifiedVersion }, signal)).dismissNotice;
  }

  /** Appends one event now, without an outbox (a Recorder is the durable way). */
  async recordEvent(input: Record<string, unknown>, signal?: AbortSignal): Promise<RecordEventResult> {
    return (await this.request(recordMutation, { in: input }, signal)).recordEvent;
  }

  /** Appends up to MAX_BATCH events in one transaction, in order; each is appended, deduplicated or refused on its own. */
  async recordEvents(inputs: Record<string, unknown>[], signal?: AbortSignal): Promise<RecordEventsItem[]> {
    return (await this.request(recordEventsMutation, { in: inputs }, signal)).recordEvents;
  }
}
