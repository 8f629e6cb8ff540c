/**
 * The OpenClaw plugin of the session state awareness service (CLT-4, CLT-5).
 *
 * mirror (the default) records OpenClaw's session events into the service through
 * the client's outbox Recorder, so dashboards, MCP clients and other gateways see
 * OpenClaw's sessions; it changes no prompt. inject also puts the service's pending
 * notices for the session into its next prompt (before_prompt_build → prependContext),
 * acknowledges exactly those after the turn succeeded, releases them when it failed,
 * and wakes an idle main session for a wake notice. Both modes register the
 * awareness_status tool. OpenClaw's turn never waits on the service beyond a stated
 * bound and never fails for it (SIG-7).
 *
 * The object below is what openclaw/plugin-sdk's definePluginEntry returns; the
 * plugin imports nothing from OpenClaw at run time.
 */
import { Bridge, bridgeFor, closeBridge } from './bridge.js';
import { configError, configJsonSchema, parseConfig, type Config } from './config.js';
import type { PluginApi } from './openclaw.js';
import { statusTool } from './tool.js';

export { parseConfig, configJsonSchema, type Config } from './config.js';
export { Keys } from './keys.js';
export { render, fit, HEADER } from './notices.js';
export { Bridge, closeBridge, settled, GOAL_TOOLS } from './bridge.js';
export { TOOL_NAME, statusTool } from './tool.js';

export const PLUGIN_ID = 'awareness';

// OpenClaw's budget for the prompt hook; the Bridge waits on the service at most 3 s of it.
const promptHookMs = 5000;

/** The agent ids OpenClaw's config names, whose sessions the parent map is rebuilt from. */
function configuredAgents(api: PluginApi): string[] {
  const ids = new Set<string>(['main']);
  const agents = api.config?.agents;
  for (const a of agents?.list ?? []) if (a?.id) ids.add(a.id);
  for (const id of Object.keys(agents?.entries ?? {})) ids.add(id);
  return [...ids];
}

function register(api: PluginApi): void {
  const parsed = parseConfig(api.pluginConfig);
  if (!parsed.success) throw new Error(configError(parsed.error.issues));
  const cfg: Config = parsed.data;
  const agents = configuredAgents(api);
  // The Bridge starts on the first hook that needs it: registrations for discovery
  // or CLI metadata never open the outbox or a connection.
  let bridge: Bridge | null = null;
  const b = (): Bridge => {
    if (!bridge || bridge.closed) {
      bridge = bridgeFor(cfg, api);
      bridge.loadParents(agents);
    }
    return bridge;
  };

  api.registerTool(statusTool(() => b().client), { name: 'awareness_status' });

  // The observing hooks hand their work to the Bridge and return at once: OpenClaw
  // awaits some of them (a spawn, a reset, a one-shot turn's end), and its turn never
  // waits on the outbox or the service (SIG-7). Their order is kept: each takes its
  // place in the Recorder's queue, or releases its notices, before it returns.
  const later = (p: Promise<unknown>): void => { b().track(p); };
  api.on('subagent_spawned', (e, ctx) => later(b().onSpawned(e, ctx)));
  api.on('subagent_ended', (e, ctx) => later(b().onEnded(e, ctx)));
  api.on('after_compaction', (e, ctx) => later(b().onCompaction(e, ctx)));
  api.on('after_tool_call', (e, ctx) => later(b().onToolCall(e, ctx)));
  api.on('before_reset', (e, ctx) => later(b().onReset(e, ctx)));
  api.on('model_call_ended', (e) => b().onModelCall(e));
  api.on('agent_end', (e, ctx) => later(b().onAgentEnd(e, ctx)));
  // The one hook a turn waits on: the notices go into this prompt (bounded, 3 s).
  api.on('before_prompt_build', (e, ctx) => b().onPromptBuild(e, ctx), { timeoutMs: promptHookMs });
  // The gateway starts the service: the Watcher then follows the parents and main
  // sessions while they are idle, so that a wake notice can wake one.
  api.registerService({
    id: 'awareness',
    start: () => { b().start(mainSessions(api, agents)); },
    stop: () => closeBridge(),
  });
}

/** The main session key of each configured agent (session.mainKey, default main). */
function mainSessions(api: PluginApi, agents: string[]): string[] {
  const mainKey = (api.config?.session as { mainKey?: string } | undefined)?.mainKey || 'main';
  return agents.map((a) => `agent:${a}:${mainKey}`);
}

const plugin = {
  id: PLUGIN_ID,
  name: 'Session state awareness',
  description: 'Mirrors OpenClaw session events into the awareness service; in inject mode, puts its stale-session notices into prompts.',
  configSchema: {
    safeParse: parseConfig,
    jsonSchema: configJsonSchema,
  },
  register,
};

export default plugin;
