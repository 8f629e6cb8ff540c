// The part of OpenClaw's plugin API (openclaw/plugin-sdk, 2026.9.6) this plugin
// uses, written out so that the package builds without the host: OpenClaw provides
// the API object at run time. The names and shapes follow the SDK's own types
// (PluginHookHandlerMap, OpenClawPluginApi); e2e/harness runs the plugin in the real
// OpenClaw, which is what holds them to the host.

/** The context of agent-turn hooks (PluginHookAgentContext). */
export interface AgentContext {
  runId?: string;
  agentId?: string;
  sessionKey?: string;
  sessionId?: string;
  messageProvider?: string;
  channel?: string;
  senderId?: string;
  trigger?: string;
  inputProvenance?: { kind?: 'external_user' | 'inter_session' | 'internal_system' | string; sourceSessionKey?: string };
  /** before_prompt_build only: throws once OpenClaw no longer takes this handler's result (its timeout passed). */
  hookInvocation?: { assertActive(): void };
}

/** The context of sub-agent hooks (PluginHookSubagentContext). */
export interface SubagentContext {
  runId?: string;
  childSessionKey?: string;
  requesterSessionKey?: string;
}

/** The context of tool hooks (PluginHookToolContext). */
export interface ToolContext {
  agentId?: string;
  sessionKey?: string;
  sessionId?: string;
  runId?: string;
  toolName: string;
  toolCallId?: string;
}

export interface SubagentSpawnedEvent {
  runId: string;
  childSessionKey: string;
  agentId: string;
  label?: string;
  mode: 'run' | 'session';
}

export interface SubagentEndedEvent {
  targetSessionKey: string;
  targetKind: 'subagent' | 'acp';
  reason: string;
  runId?: string;
  endedAt?: number;
  outcome?: 'ok' | 'error' | 'timeout' | 'killed' | 'reset' | 'deleted';
  error?: string;
}

export interface AfterCompactionEvent {
  messageCount: number;
  compactedCount: number;
  tokenCount?: number;
  previousSessionId?: string;
}

export interface AfterToolCallEvent {
  toolName: string;
  params: Record<string, unknown>;
  runId?: string;
  toolCallId?: string;
  result?: unknown;
  error?: string;
}

export interface BeforeResetEvent {
  reason?: string;
}

export interface BeforePromptBuildEvent {
  prompt: string;
  messages: unknown[];
}

export interface BeforePromptBuildResult {
  prependContext?: string;
}

export interface AgentEndEvent {
  runId?: string;
  success: boolean;
  error?: string;
}

/** One provider call of a run (model_call_ended; emitted by the embedded runner). */
export interface ModelCallEndedEvent {
  runId: string;
  callId: string;
  sessionKey?: string;
  outcome: 'completed' | 'error';
}

export interface HookHandlers {
  subagent_spawned: (e: SubagentSpawnedEvent, ctx: SubagentContext) => void | Promise<void>;
  subagent_ended: (e: SubagentEndedEvent, ctx: SubagentContext) => void | Promise<void>;
  after_compaction: (e: AfterCompactionEvent, ctx: AgentContext) => void | Promise<void>;
  after_tool_call: (e: AfterToolCallEvent, ctx: ToolContext) => void | Promise<void>;
  before_reset: (e: BeforeResetEvent, ctx: AgentContext) => void | Promise<void>;
  before_prompt_build: (e: BeforePromptBuildEvent, ctx: AgentContext) => BeforePromptBuildResult | void | Promise<BeforePromptBuildResult | void>;
  agent_end: (e: AgentEndEvent, ctx: AgentContext) => void | Promise<void>;
  model_call_ended: (e: ModelCallEndedEvent, ctx: AgentContext) => void | Promise<void>;
  gateway_stop: (e: unknown, ctx: unknown) => void | Promise<void>;
}

export type HookName = keyof HookHandlers;

/** A tool result (AgentToolResult). */
export interface ToolResult {
  content: { type: 'text'; text: string }[];
  details?: unknown;
}

/** An agent tool (AnyAgentTool), its parameters a JSON Schema. */
export interface AgentTool {
  name: string;
  label?: string;
  description: string;
  parameters: Record<string, unknown>;
  execute: (toolCallId: string, params: Record<string, unknown>, signal?: AbortSignal) => Promise<ToolResult>;
}

export interface Logger {
  debug?: (msg: string) => void;
  info: (msg: string) => void;
  warn: (msg: string) => void;
  error: (msg: string) => void;
}

/** One entry of OpenClaw's session store, as far as this plugin reads it. */
export interface SessionEntry {
  sessionId?: string;
  spawnedBy?: string;
  parentSessionKey?: string;
}

/** What the plugin uses of api.runtime. Every member is checked before use. */
export interface Runtime {
  system?: {
    enqueueSystemEvent?: (text: string, opts: { sessionKey: string; agentId?: string; contextKey?: string | null }) => boolean;
    requestHeartbeat?: (opts: { source: string; intent: string; reason?: string; agentId?: string; sessionKey?: string; coalesceMs?: number }) => void;
  };
  state?: { resolveStateDir?: (env?: NodeJS.ProcessEnv) => string };
  agent?: {
    session?: {
      getSessionEntry?: (p: { agentId?: string; sessionKey: string }) => SessionEntry | undefined;
      listSessionEntries?: (p?: { agentId?: string; readOnly?: boolean }) => { sessionKey: string; entry: SessionEntry }[];
    };
  };
}

/** The plugin API object register() receives (OpenClawPluginApi). */
export interface PluginApi {
  id: string;
  registrationMode?: string;
  config?: { agents?: { list?: { id?: string }[]; entries?: Record<string, unknown> } } & Record<string, unknown>;
  pluginConfig?: Record<string, unknown>;
  runtime?: Runtime;
  logger: Logger;
  on<K extends HookName>(name: K, handler: HookHandlers[K], opts?: { priority?: number; timeoutMs?: number }): void;
  registerTool(tool: AgentTool, opts?: { name?: string; optional?: boolean }): void;
  registerService(service: { id: string; start: () => void | Promise<void>; stop?: () => void | Promise<void> }): void;
  lifecycle?: { onDispose?: (cleanup: () => void | Promise<void>) => unknown };
}

/** A config check's result (OpenClawPluginConfigSchema.safeParse). */
export type SafeParse<T> =
  | { success: true; data: T }
  | { success: false; error: { issues: { path: (string | number)[]; message: string }[] } };
