// The process-wide half of the plugin: one Recorder (outbox), one Watcher connection,
// the parent map and the notices each running turn holds. OpenClaw calls register()
// several times per process (discovery, tool discovery, the live instance, and again
// after every config reload), each time with a fresh API object; every registration
// reaches the same Bridge through a global slot, so no event is recorded twice and no
// notice is drained by two Watchers.
import { mkdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { AckPendingError, Client, Recorder, RecordTimeoutError, Watcher, type Event, type Notice } from '@awareness/client';
import type { Config } from './config.js';
import { Keys } from './keys.js';
import { fit, render } from './notices.js';
import type {
  AfterCompactionEvent, AfterToolCallEvent, AgentContext, AgentEndEvent, BeforePromptBuildEvent, BeforePromptBuildResult,
  BeforeResetEvent, Logger, ModelCallEndedEvent, PluginApi, Runtime, SubagentContext, SubagentEndedEvent, SubagentSpawnedEvent, ToolContext,
} from './openclaw.js';

/** The tools whose successful calls change a session's goal (goal_changed). */
export const GOAL_TOOLS: Record<string, string> = { create_goal: 'goal created', update_goal: 'goal updated' };

// How long a prompt waits for the Watcher to hold what pendingNotices just listed.
const catchUpMs = 1000;
// The most a prompt waits on the service in all (OpenClaw's own budget for the hook is 15 s).
const promptWaitMs = 3000;
// At most one wake request per watcher in this window; a notice that opens within it
// wakes at its end. OpenClaw itself spaces event turns (30 s) and keeps a deferred
// wake that carries a queued event.
const wakeSpacingMs = 2000;
// Bounds of the run-id sets kept to tell a spawn's own turn and recorded human turns.
const maxRuns = 10_000;

const SLOT = Symbol.for('@awareness/openclaw.bridge');

/** A turn's drained notices, settled when the turn ends (ack on success, release on failure). */
interface Held {
  watcher: string;
  session: string;
  notices: Notice[];
  text: string;
}

/** A run's provider calls (model_call_ended): how many answered, how many failed. */
interface Calls {
  completed: number;
  failed: number;
}

/** The Bridge of this process for cfg: the running one when its config is the same, else a new one (the old one closes). */
export function bridgeFor(cfg: Config, api: PluginApi): Bridge {
  const g = globalThis as { [SLOT]?: Bridge };
  const key = JSON.stringify(cfg);
  const cur = g[SLOT];
  if (cur && cur.key === key && !cur.closed) {
    cur.attach(api);
    return cur;
  }
  // The old Bridge (another config) lets go of the outbox before the new one takes it.
  const previous = cur ? cur.close() : Promise.resolve();
  const b = new Bridge(cfg, key, api, previous);
  g[SLOT] = b;
  return b;
}

/** Resolves once the work the hooks handed to this process's Bridge is done (acknowledgements, outbox writes). */
export async function settled(): Promise<void> {
  const b = (globalThis as { [SLOT]?: Bridge })[SLOT];
  await b?.settled();
}

/** Closes this process's Bridge, if any (tests; the gateway's stop). */
export async function closeBridge(): Promise<void> {
  const g = globalThis as { [SLOT]?: Bridge };
  const b = g[SLOT];
  delete g[SLOT];
  await b?.close();
}

function addBounded(set: Set<string>, v: string) {
  if (set.size >= maxRuns) set.delete(set.values().next().value as string);
  set.add(v);
}

export class Bridge {
  readonly cfg: Config;
  readonly key: string;
  readonly keys: Keys;
  readonly client: Client;
  closed = false;
  #log: Logger;
  #runtime: Runtime | undefined;
  #recorder: Promise<Recorder | null> | null = null;
  #watcher: Watcher | null = null;
  /** OpenClaw child session key → its parent's (requester's) key. */
  readonly parents = new Map<string, string>();
  #parentsLoaded = false;
  /** Run ids of spawn turns (the parent's task delivered into the child): not human. */
  readonly #spawnRuns = new Set<string>();
  /** Run ids whose human message is recorded already (a run's retries build the prompt again). */
  readonly #humanRuns = new Set<string>();
  /** Notices drained for a running turn, by run id. */
  readonly #held = new Map<string, Held>();
  /** The run in progress per OpenClaw session key. */
  readonly #active = new Map<string, string>();
  readonly #calls = new Map<string, Calls>();
  /** Whether this process's runner reports provider calls at all (model_call_ended). */
  #callsReported = false;
  /** Run ids whose subagent_ended arrived. */
  readonly #ended = new Set<string>();
  readonly #endTimers = new Set<NodeJS.Timeout>();
  /** How long a child's failed run waits for subagent_ended (which has its precise outcome) before it is recorded as an error. */
  static runEndGraceMs = 10_000;
  readonly #lastWake = new Map<string, number>();
  readonly #wakeTimers = new Map<string, NodeJS.Timeout>();

  readonly #previous: Promise<void>;

  constructor(cfg: Config, key: string, api: PluginApi, previous: Promise<void> = Promise.resolve()) {
    this.cfg = cfg;
    this.key = key;
    this.keys = new Keys(cfg.agentIds);
    this.#log = api.logger;
    this.#runtime = api.runtime;
    this.#previous = previous;
    const token = cfg.tokenFile ? readFileSync(cfg.tokenFile, 'utf8').trim() : undefined;
    // Through the latest registration's logger: an older instance's may be retired.
    this.client = new Client(cfg.url, {
      token,
      timeoutMs: 5000,
      logger: { debug: (m) => this.#log.debug?.(m), info: (m) => this.#log.info(m), warn: (m) => this.#log.warn(m), error: (m) => this.#log.error(m) },
    });
  }

  readonly #work = new Set<Promise<unknown>>();

  /** Keeps p (work a hook handed over and did not wait for) until it ends. */
  track(p: Promise<unknown>): void {
    const q = p.catch(() => {}).finally(() => this.#work.delete(q));
    this.#work.add(q);
  }

  /** Resolves once the work handed over so far is done. */
  async settled(): Promise<void> {
    while (this.#work.size) await Promise.all([...this.#work]);
  }

  /** A newer registration of the plugin: its runtime handles are the live ones. */
  attach(api: PluginApi): void {
    this.#log = api.logger;
    if (api.runtime) this.#runtime = api.runtime;
  }

  // ---- recording (mirror, both modes) -------------------------------------------

  /** The Recorder, opened on first use; null when another process owns the outbox (events then go straight to the service). */
  #openRecorder(): Promise<Recorder | null> {
    if (this.#recorder) return this.#recorder;
    this.#recorder = (async () => {
      await this.#previous;
      const path = this.cfg.outbox ?? join(this.#stateDir(), 'awareness', 'outbox');
      mkdirSync(dirname(path), { recursive: true });
      try {
        const r = await Recorder.open(this.client, path);
        r.on('error', (e) => this.#log.warn(`awareness: ${e}`));
        this.#log.info(`awareness: recording into ${this.cfg.url} through the outbox ${path} (${this.cfg.mode} mode)`);
        return r;
      } catch (e) {
        this.#log.warn(`awareness: ${(e as Error).message}; this process records straight to the service, without an outbox`);
        return null;
      }
    })();
    return this.#recorder;
  }

  #stateDir(): string {
    const fromRuntime = this.#runtime?.state?.resolveStateDir?.(process.env);
    return fromRuntime || process.env.OPENCLAW_STATE_DIR || join(process.env.HOME ?? '.', '.openclaw');
  }

  /**
   * Records ev (its keys already the service's) and never throws: a refusal or an
   * outage is logged and the turn goes on (SIG-7). Resolves once the event is spooled.
   */
  async record(ev: Event): Promise<void> {
    if (this.closed) return;
    try {
      const r = await this.#openRecorder();
      if (r) {
        await r.record(ev);
        return;
      }
      const { occurredAt, ...rest } = ev;
      await this.client.recordEvent({
        ...rest,
        occurredAt: (occurredAt instanceof Date ? occurredAt : new Date()).toISOString(),
        dedupeKey: ev.dedupeKey ?? `openclaw:${randomBytes(12).toString('hex')}`,
      });
    } catch (e) {
      // A slow disk: the event is in the batch being written and is delivered after it.
      if (e instanceof RecordTimeoutError) this.#log.info(`awareness: the outbox write of ${ev.kind} on ${ev.sessionKey} is slow; it is delivered once written`);
      else this.#log.warn(`awareness: ${ev.kind} on ${ev.sessionKey} not recorded: ${(e as Error).message}`);
    }
  }

  /** The parent (requester) of an OpenClaw session: known from its spawn, else from OpenClaw's session store (after a restart). */
  parentOf(key: string, agentId?: string): string | undefined {
    const known = this.parents.get(key);
    if (known) return known;
    let entry;
    try {
      entry = this.#runtime?.agent?.session?.getSessionEntry?.({ agentId, sessionKey: key });
    } catch {
      return undefined;
    }
    const parent = entry?.spawnedBy ?? entry?.parentSessionKey;
    if (parent) this.parents.set(key, parent);
    return parent || undefined;
  }

  /**
   * Rebuilds the parent map from OpenClaw's session store (every entry with a
   * spawnedBy), once per process, so that a restarted gateway names the same watchers
   * and, in inject mode, follows every parent again.
   */
  loadParents(agentIds: string[]): void {
    if (this.#parentsLoaded) return;
    this.#parentsLoaded = true;
    const list = this.#runtime?.agent?.session?.listSessionEntries;
    if (!list) return;
    for (const agentId of agentIds) {
      try {
        for (const { sessionKey, entry } of list({ agentId, readOnly: true })) {
          const parent = entry?.spawnedBy ?? entry?.parentSessionKey;
          if (parent && !this.parents.has(sessionKey)) this.parents.set(sessionKey, parent);
        }
      } catch (e) {
        this.#log.warn(`awareness: reading OpenClaw's sessions of agent ${agentId}: ${(e as Error).message}`);
      }
    }
  }

  /** Starts in the gateway: in inject mode, follows the main sessions and every known parent now. */
  start(mainSessions: string[]): void {
    if (this.closed) return;
    const follow = this.cfg.mode === 'inject' ? [...new Set([...mainSessions, ...this.parents.values()])] : [];
    this.#log.info(`awareness: started in ${this.cfg.mode} mode against ${this.cfg.url}; ${this.parents.size} child sessions known from OpenClaw's store; following ${follow.length} sessions' notices`);
    for (const s of follow) void this.#follow(s);
  }

  onSpawned(e: SubagentSpawnedEvent, ctx: SubagentContext): Promise<void> {
    const child = e.childSessionKey;
    const parent = ctx.requesterSessionKey;
    const runId = e.runId || ctx.runId;
    if (runId) addBounded(this.#spawnRuns, runId);
    const c = this.keys.toService(child, e.agentId);
    if (!c) return Promise.resolve();
    const w = parent ? this.keys.watcher(parent) : null;
    if (parent) {
      this.parents.set(child, parent);
      if (this.cfg.mode === 'inject') void this.#follow(parent);
    }
    return this.record({
      ...c, kind: 'child_spawned', actorType: 'agent',
      ...(w ? { actorId: w, watchers: [w] } : {}),
      ...(runId ? { runId, dedupeKey: `child-spawned:${runId}` } : {}),
    });
  }

  onEnded(e: SubagentEndedEvent, ctx: SubagentContext): Promise<void> {
    const runId = e.runId ?? ctx.runId;
    if (runId) addBounded(this.#ended, runId);
    const c = this.keys.toService(e.targetSessionKey);
    if (!c) return Promise.resolve();
    // reset: the run ended because its session was reset (before_reset covers the
    // session); deleted: the session is gone. Neither is a run outcome of SIG-1.
    let ev: Event;
    switch (e.outcome) {
      case 'ok': ev = { ...c, kind: 'run_completed', actorType: 'system' }; break;
      case 'error': ev = { ...c, kind: 'run_failed', actorType: 'system', outcome: 'error' }; break;
      case 'timeout': ev = { ...c, kind: 'run_failed', actorType: 'system', outcome: 'timeout' }; break;
      case 'killed': ev = { ...c, kind: 'run_failed', actorType: 'system', outcome: 'cancelled' }; break;
      default: return Promise.resolve();
    }
    return this.record({ ...ev, ...(runId ? { runId, dedupeKey: `run-terminal:${runId}` } : {}) });
  }

  /**
   * The end of a run in a child session, from the child's own agent_end: OpenClaw
   * 2026.9.6 sends no subagent_ended for a run that a newer run of the same child
   * superseded before its terminal bookkeeping ran (a person's message soon after the
   * spawn turn), while its own log has the run's end. A run that answered is
   * run_completed at once, with the dedupe key subagent_ended uses (so either is one
   * event); a failed one waits for subagent_ended's precise outcome, and is an error
   * when none comes.
   */
  #childRunEnded(e: AgentEndEvent, ctx: AgentContext, answered: boolean): void {
    const runId = e.runId ?? ctx.runId;
    if (!runId || !ctx.sessionKey || this.#ended.has(runId)) return;
    if (!this.parentOf(ctx.sessionKey, ctx.agentId)) return;
    const c = this.keys.toService(ctx.sessionKey, ctx.agentId);
    if (!c) return;
    const dedupe = { runId, dedupeKey: `run-terminal:${runId}` };
    if (e.success && answered) {
      void this.record({ ...c, kind: 'run_completed', actorType: 'system', ...dedupe });
      return;
    }
    const t = setTimeout(() => {
      this.#endTimers.delete(t);
      if (!this.#ended.has(runId)) void this.record({ ...c, kind: 'run_failed', actorType: 'system', outcome: 'error', ...dedupe });
    }, Bridge.runEndGraceMs);
    t.unref();
    this.#endTimers.add(t);
  }

  onCompaction(e: AfterCompactionEvent, ctx: AgentContext): Promise<void> {
    if (!ctx.sessionKey) return Promise.resolve();
    const c = this.keys.toService(ctx.sessionKey, ctx.agentId);
    if (!c) return Promise.resolve();
    return this.record({ ...c, kind: 'compacted', actorType: 'system', ...(ctx.runId ? { runId: ctx.runId } : {}) });
  }

  onToolCall(e: AfterToolCallEvent, ctx: ToolContext): Promise<void> {
    const summary = GOAL_TOOLS[e.toolName];
    if (!summary || e.error || !ctx.sessionKey) return Promise.resolve();
    const c = this.keys.toService(ctx.sessionKey, ctx.agentId);
    if (!c) return Promise.resolve();
    const self = this.keys.watcher(ctx.sessionKey);
    const parent = this.parentOf(ctx.sessionKey, ctx.agentId);
    const w = parent ? this.keys.watcher(parent) : null;
    const runId = e.runId ?? ctx.runId;
    return this.record({
      ...c, kind: 'goal_changed', actorType: 'agent', summary,
      ...(self ? { actorId: self } : {}),
      ...(w ? { watchers: [w] } : {}),
      ...(runId ? { runId } : {}),
      ...(e.toolCallId ?? ctx.toolCallId ? { dedupeKey: `goal:${e.toolCallId ?? ctx.toolCallId}` } : {}),
    });
  }

  /**
   * A reset starts a new incarnation of the session: the service's resetSession
   * drops the cursors it holds as a watcher (WAT-5). The service's event vocabulary
   * has no reset kind, so nothing enters the log. Best effort, like recording.
   */
  async onReset(_e: BeforeResetEvent, ctx: AgentContext): Promise<void> {
    if (!ctx.sessionKey) return;
    const c = this.keys.toService(ctx.sessionKey, ctx.agentId);
    if (!c) return;
    try {
      await this.client.request('mutation($k: String!, $a: String) { resetSession(sessionKey: $k, agentId: $a) }', { k: c.sessionKey, a: c.agentId });
    } catch (e) {
      this.#log.warn(`awareness: resetSession(${c.sessionKey}): ${(e as Error).message}`);
    }
  }

  /**
   * A human turn in a child session: human_direct_message with the parent as watcher.
   * A turn is human unless OpenClaw marks its input as another session's or the
   * system's, or it is the child's spawn turn (the parent's task).
   */
  #recordHuman(e: BeforePromptBuildEvent, ctx: AgentContext): void {
    const key = ctx.sessionKey;
    if (!key || (ctx.trigger && ctx.trigger !== 'user')) return;
    const kind = ctx.inputProvenance?.kind;
    if (kind === 'inter_session' || kind === 'internal_system') return;
    if (ctx.runId && (this.#spawnRuns.has(ctx.runId) || this.#humanRuns.has(ctx.runId))) return;
    const parent = this.parentOf(key, ctx.agentId);
    if (!parent) return;
    // The spawn turn may build its prompt before subagent_spawned arrives: it is the
    // first turn of the child, with no history yet.
    if (!e.messages?.length) return;
    const c = this.keys.toService(key, ctx.agentId);
    const w = this.keys.watcher(parent);
    if (!c || !w) return;
    if (ctx.runId) addBounded(this.#humanRuns, ctx.runId);
    const channel = (ctx.messageProvider || ctx.channel || 'unknown').slice(0, 64);
    void this.record({
      ...c, kind: 'human_direct_message', actorType: 'human', channel, watchers: [w],
      ...(ctx.senderId ? { actorId: ctx.senderId.slice(0, 512) } : {}),
      ...(ctx.runId ? { runId: ctx.runId, dedupeKey: `human:${ctx.runId}` } : {}),
    });
  }

  // ---- notices (inject mode) ----------------------------------------------------

  #getWatcher(): Watcher {
    if (this.#watcher) return this.#watcher;
    const w = new Watcher(this.client, []);
    w.on('error', (e) => this.#log.debug?.(`awareness watcher: ${e}`));
    w.on('ack', (acks) => this.#log.debug?.(`awareness: ${acks.length} acknowledgements delivered after a retry`));
    w.on('notice', (watcher: string) => this.#maybeWake(watcher));
    this.#watcher = w;
    return w;
  }

  /** Follows an OpenClaw session's notices (inject mode); resolves with its service key, or null for a key that cannot watch. */
  async #follow(openclawKey: string): Promise<string | null> {
    const w = this.keys.watcher(openclawKey);
    if (!w || this.closed) return null;
    const watcher = this.#getWatcher();
    if (watcher.watchers.includes(w)) return w;
    try {
      return await watcher.addWatcher(w);
    } catch (e) {
      this.#log.warn(`awareness: following the notices of ${w}: ${(e as Error).message}`);
      return null;
    }
  }

  /**
   * Before a turn builds its prompt: records a human turn into a child session, and,
   * in inject mode, drains the session's notices into prependContext. A run whose
   * prompt is built again (a retry, a fallback model) gets the same notices again,
   * plus any that opened since.
   */
  async onPromptBuild(e: BeforePromptBuildEvent, ctx: AgentContext): Promise<BeforePromptBuildResult | void> {
    this.#recordHuman(e, ctx);
    if (this.cfg.mode !== 'inject' || !ctx.sessionKey || this.closed) return;
    const session = ctx.sessionKey;
    const runId = ctx.runId ?? `session:${session}`;
    const prev = this.#active.get(session);
    if (prev && prev !== runId) {
      // The session's previous turn never reported its end: hand its notices back.
      this.#settle(prev, false);
    }
    this.#active.set(session, runId);
    const w = this.keys.watcher(session);
    if (!w) return;
    // Bounded well inside OpenClaw's budget for the hook: what is not in the Watcher
    // by then comes with the next turn.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      (async () => { if (await this.#follow(session)) await this.#catchUp(this.#getWatcher(), w); })(),
      new Promise<void>((resolve) => { timer = setTimeout(resolve, promptWaitMs); }),
    ]);
    clearTimeout(timer);
    const watcher = this.#getWatcher();
    if (!watcher.watchers.includes(w)) return;
    // Drain only while OpenClaw still takes this handler's result: notices drained for a
    // prompt that never got them would be acknowledged unseen.
    try {
      ctx.hookInvocation?.assertActive();
    } catch {
      return;
    }
    const held = this.#held.get(runId);
    const fresh = watcher.drain(w);
    const all = [...(held?.notices ?? []), ...fresh];
    if (!all.length) return;
    const n = fit(all, this.cfg.maxNoticeChars);
    const shown = all.slice(0, n);
    const rest = all.slice(n);
    if (rest.length) watcher.release(rest);
    const text = render(shown, rest.length);
    this.#held.set(runId, { watcher: w, session, notices: shown, text });
    return { prependContext: text };
  }

  /** Waits (at most catchUpMs) until the Watcher holds every notice the service lists as pending for w now. */
  async #catchUp(watcher: Watcher, w: string): Promise<void> {
    let pending: Notice[];
    try {
      pending = await this.client.pendingNotices(w, AbortSignal.timeout(catchUpMs));
    } catch {
      return; // the service is down: inject what the Watcher has
    }
    const want = (n: Notice) => `${n.targetAgentId}\0${n.target}\0${n.notifiedVersion}`;
    const missing = () => {
      const have = new Set([...watcher.pending(w), ...watcher.drained(w)].map(want));
      return pending.some((n) => !have.has(want(n)));
    };
    if (!missing()) return;
    await new Promise<void>((resolve) => {
      const done = () => { clearTimeout(t); watcher.off('change', check); resolve(); };
      const check = () => { if (!missing()) done(); };
      const t = setTimeout(done, catchUpMs);
      watcher.on('change', check);
    });
  }

  /** A provider call of a run ended: whether the model took the run's prompt. */
  onModelCall(e: ModelCallEndedEvent): void {
    if (!e.runId) return;
    this.#callsReported = true;
    let c = this.#calls.get(e.runId);
    if (!c) {
      if (this.#calls.size >= maxRuns) this.#calls.delete(this.#calls.keys().next().value as string);
      this.#calls.set(e.runId, (c = { completed: 0, failed: 0 }));
    }
    if (e.outcome === 'completed') c.completed++;
    else c.failed++;
  }

  /**
   * After a turn: acknowledge exactly its notices when it succeeded (NTC-3), release
   * them when it failed (CLT-5). A turn succeeded when OpenClaw says so and, where the
   * runner reports its provider calls (model_call_ended), one of them answered:
   * OpenClaw 2026.9.6 reports success for a turn whose only model call was refused,
   * and for one that failed before calling the model.
   */
  async onAgentEnd(e: AgentEndEvent, ctx: AgentContext): Promise<void> {
    const runId = e.runId ?? ctx.runId ?? (ctx.sessionKey ? `session:${ctx.sessionKey}` : undefined);
    if (!runId) return;
    const calls = this.#calls.get(runId);
    this.#calls.delete(runId);
    // A runner that reports its provider calls answered the prompt only if one answered:
    // a run that failed before any call (OpenClaw retries some such runs and then
    // reports success) did not show its notices to the model.
    const answered = calls ? calls.completed > 0 : !this.#callsReported;
    this.#childRunEnded(e, ctx, answered);
    if (ctx.sessionKey && this.#active.get(ctx.sessionKey) === runId) this.#active.delete(ctx.sessionKey);
    await this.#settle(runId, e.success && answered);
    if (ctx.sessionKey && this.#watcher) {
      const w = this.keys.watcher(ctx.sessionKey);
      if (w) this.#maybeWake(w);
    }
  }

  async #settle(runId: string, success: boolean): Promise<void> {
    const h = this.#held.get(runId);
    if (!h) return;
    this.#held.delete(runId);
    const watcher = this.#getWatcher();
    if (!success) {
      watcher.release(h.notices);
      this.#log.info(`awareness: the turn ${runId} failed; ${h.notices.length} notices go to the next turn`);
      return;
    }
    try {
      const acks = await watcher.ack(h.notices);
      this.#log.debug?.(`awareness: acknowledged ${acks.map((a) => `${a.target}@${a.notifiedVersion}:${a.outcome}`).join(', ')}`);
    } catch (err) {
      if (err instanceof AckPendingError) this.#log.warn(`awareness: ${err.message}`);
      else this.#log.warn(`awareness: acknowledging ${h.notices.length} notices: ${(err as Error).message}`);
    }
  }

  /** Wakes an idle main session when one of its open notices asks for it (NTC-6). */
  #maybeWake(w: string): void {
    if (!this.cfg.wake || this.closed || !this.#watcher) return;
    const session = this.keys.toOpenClaw(w);
    if (this.#active.has(session)) return;
    const wake = this.#watcher.pending(w).find((n) => n.wake);
    if (!wake) return;
    const now = Date.now();
    const wait = (this.#lastWake.get(w) ?? 0) + wakeSpacingMs - now;
    if (wait > 0) {
      if (!this.#wakeTimers.has(w)) {
        const t = setTimeout(() => { this.#wakeTimers.delete(w); this.#maybeWake(w); }, wait);
        t.unref();
        this.#wakeTimers.set(w, t);
      }
      return;
    }
    const system = this.#runtime?.system;
    if (!system?.requestHeartbeat) return;
    this.#lastWake.set(w, now);
    const agentId = this.keys.openclawAgent(w);
    try {
      // The queued line only says why the turn runs; the notices themselves come
      // through before_prompt_build, drained and acknowledged like any other turn's.
      system.enqueueSystemEvent?.('[awareness] A session this one depends on changed; the notices are in this prompt.', {
        sessionKey: session, agentId, contextKey: 'awareness:wake',
      });
      system.requestHeartbeat({ source: 'session-state', intent: 'immediate', reason: `awareness:${wake.target}`, agentId, sessionKey: session });
      this.#log.info(`awareness: woke ${session} for ${wake.target}`);
    } catch (e) {
      this.#log.warn(`awareness: waking ${session}: ${(e as Error).message}`);
    }
  }

  /** Flushes the outbox (briefly) and closes the connection; the service keeps what was not acknowledged. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const r = await this.#recorder?.catch(() => null);
    await r?.flush(2000).catch(() => {});
    await r?.close().catch(() => {});
    for (const t of this.#endTimers) clearTimeout(t);
    this.#endTimers.clear();
    for (const t of this.#wakeTimers.values()) clearTimeout(t);
    this.#wakeTimers.clear();
    for (const h of this.#held.values()) this.#watcher?.release(h.notices);
    this.#held.clear();
    await this.#watcher?.close();
  }
}
