import { AwarenessError, Client, Codes } from './client.js';

/** One event of a session's log (the GraphQL StateEvent). */
export interface StateEvent {
  sequence: number;
  kind: string;
  actorType: string;
  actorId: string | null;
  summary: string;
  occurredAt: string;
  runId: string | null;
  payload: Record<string, unknown> | null;
}

/** A session: its key, and its agent for a bare key (KEY-3). */
export interface Target {
  sessionKey: string;
  agentId?: string;
}

export interface Reconciliation {
  /** The events after changesSince, ascending; complete unless fullRefresh. */
  events: StateEvent[];
  stateVersion: number;
  /** The delta cannot be applied (historyGap, REC-2; CURSOR_AHEAD, REC-3): refresh the whole session state. */
  fullRefresh: boolean;
  reason?: string;
}

const statusQuery = `query($k: String!, $a: String, $s: Int, $l: Int) { sessionStatus(sessionKey: $k, agentId: $a, changesSince: $s, limit: $l) {
  stateVersion stateChanges { events { sequence kind actorType actorId summary occurredAt runId payload }
  historyGap truncated earliestAvailableSequence nextChangesSince } } }`;

/** The longest RATE_LIMITED wait reconcile takes by itself; a longer one is thrown to the caller. */
const maxRetryAfterMs = 5000;

/**
 * Reads every change of target after changesSince, following nextChangesSince across truncated pages (REC-1).
 * A page refused with RATE_LIMITED (the token's query budget, ERR-4) is asked again after its retryAfterMs,
 * up to 5 s. It never moves a cursor (REC-4).
 */
export async function reconcile(client: Client, target: Target, changesSince: number, signal?: AbortSignal): Promise<Reconciliation> {
  const out: Reconciliation = { events: [], stateVersion: 0, fullRefresh: false };
  let since = changesSince;
  for (;;) {
    let data;
    try {
      data = await client.request(statusQuery, { k: target.sessionKey, a: target.agentId || undefined, s: since, l: 200 }, signal);
    } catch (e) {
      if (e instanceof AwarenessError && e.code === Codes.RateLimited && e.retryAfterMs !== undefined &&
        e.retryAfterMs > 0 && e.retryAfterMs <= maxRetryAfterMs) {
        await sleep(e.retryAfterMs, signal);
        continue;
      }
      if (e instanceof AwarenessError && e.code === Codes.CursorAhead) {
        return { ...out, fullRefresh: true, reason: "changesSince is ahead of the session's version (CURSOR_AHEAD): its history was reset or deleted" };
      }
      throw e;
    }
    const st = data.sessionStatus;
    out.stateVersion = st.stateVersion;
    out.events.push(...st.stateChanges.events);
    if (st.stateChanges.historyGap) {
      out.fullRefresh = true;
      out.reason = 'part of the delta was pruned (historyGap)';
    }
    if (!st.stateChanges.truncated || st.stateChanges.nextChangesSince <= since) return out;
    since = st.stateChanges.nextChangesSince;
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => { signal?.removeEventListener('abort', abort); resolve(); }, ms);
    const abort = () => { clearTimeout(t); reject(signal!.reason); };
    signal?.addEventListener('abort', abort, { once: true });
  });
}
