// The GraphQL-over-HTTP client of the awareness service.

/** Error codes of the service (extensions.code, ERR-1) that the client acts on. */
export const Codes = {
  InvalidArgument: 'INVALID_ARGUMENT',
  NotFound: 'NOT_FOUND',
  CursorAhead: 'CURSOR_AHEAD',
  Unauthenticated: 'UNAUTHENTICATED',
  Forbidden: 'FORBIDDEN',
  Unavailable: 'UNAVAILABLE',
  Internal: 'INTERNAL',
} as const;

/** An answer of the service that refused the request. */
export class AwarenessError extends Error {
  constructor(message: string, readonly code: string, readonly status: number) {
    super(code ? `awareness: ${code}: ${message}` : `awareness: ${message}`);
    this.name = 'AwarenessError';
  }
  /** Retrying the same request cannot change the answer (invalid, forbidden …). */
  get permanent(): boolean {
    if (this.code === Codes.Unavailable || this.code === Codes.Internal || this.code === 'RATE_LIMITED') return false;
    if (this.code === '') return this.status > 0 && this.status < 500;
    return true;
  }
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
  /** Sent as "Authorization: Bearer <token>" and in the WebSocket connection_init payload. */
  token?: string;
  /** Bounds one HTTP request (default 10 s). */
  timeoutMs?: number;
  logger?: Logger;
}

/** Talks to one awareness service; holds no timer or socket of its own. */
export class Client {
  readonly endpoint: string;
  readonly wsUrl: string;
  readonly authorization: string;
  readonly timeoutMs: number;
  readonly log: Logger;

  /** endpoint: the service's GraphQL endpoint, e.g. http://127.0.0.1:8080/query. */
  constructor(endpoint: string, opts: ClientOptions = {}) {
    const u = new URL(endpoint);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error(`awareness client: endpoint ${endpoint}: want http(s)://host:port/query`);
    if (u.pathname === '' || u.pathname === '/') u.pathname = '/query';
    this.endpoint = u.toString();
    const ws = new URL(this.endpoint);
    ws.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
    this.wsUrl = ws.toString();
    this.authorization = opts.token ? `Bearer ${opts.token}` : '';
    this.timeoutMs = opts.timeoutMs ?? 10_000;
    this.log = opts.logger ?? silent;
  }

  /** Runs one GraphQL operation and returns its data; an answer with errors throws its first as an AwarenessError. */
  async request<T = any>(query: string, variables: Record<string, unknown> = {}, signal?: AbortSignal): Promise<T> {
    const timeout = AbortSignal.timeout(this.timeoutMs);
    const res = await fetch(this.endpoint, {
      method: 'POST',
      headers: {
        'Content-Type': 'application/json', Accept: 'application/json',
        ...(this.authorization ? { Authorization: this.authorization } : {}),
      },
      body: JSON.stringify({ query, variables }),
      signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
    });
    const text = await res.text();
    let body: { data?: T; errors?: { message: string; extensions?: { code?: string } }[] };
    try {
      body = JSON.parse(text);
    } catch {
      throw new AwarenessError(`HTTP ${res.status} with a body that is not a GraphQL answer`, '', res.status);
    }
    if (body.errors?.length) {
      const e = body.errors[0];
      throw new AwarenessError(e.message, e.extensions?.code ?? '', res.status);
    }
    if (!res.ok) throw new AwarenessError(`HTTP ${res.status}`, '', res.status);
    return body.data as T;
  }
}
