// Watcher naming: OpenClaw's session keys and the service's (KEY-1..3), one to one.
import { parseSessionKey } from '@awareness/client';

/** A session as the service names it: its key, and its agent for a bare key (KEY-3). */
export interface ServiceSession {
  sessionKey: string;
  agentId?: string;
}

/** Maps session keys between OpenClaw and the service by the config's agentIds. */
export class Keys {
  readonly #to: Map<string, string>;
  readonly #from: Map<string, string>;

  constructor(agentIds: Record<string, string>) {
    this.#to = new Map(Object.entries(agentIds));
    this.#from = new Map(Object.entries(agentIds).map(([a, b]) => [b, a]));
  }

  /** The service's agent id of an OpenClaw agent. */
  agent(openclawAgentId: string): string {
    return this.#to.get(openclawAgentId) ?? openclawAgentId;
  }

  /**
   * The service's name of an OpenClaw session: agent:<a>:<rest> with the agent
   * mapped; a bare key (global, cron:…, hook:…) stays and carries its mapped agent.
   * null for a key that does not parse.
   */
  toService(key: string, agentId?: string): ServiceSession | null {
    const p = parseSessionKey(key);
    if (p) return { sessionKey: `agent:${this.agent(p.agentId)}:${p.rest}` };
    const bare = key.trim();
    if (!bare) return null;
    return { sessionKey: bare, agentId: this.agent(agentId || 'main') };
  }

  /** The service's key of an agent-qualified OpenClaw session, or null (bare keys never watch, KEY-3). */
  watcher(key: string): string | null {
    const p = parseSessionKey(key);
    return p ? `agent:${this.agent(p.agentId)}:${p.rest}` : null;
  }

  /** The OpenClaw key of a service key (a watcher's, for a wake). */
  toOpenClaw(serviceKey: string): string {
    const p = parseSessionKey(serviceKey);
    if (!p) return serviceKey;
    return `agent:${this.#from.get(p.agentId) ?? p.agentId}:${p.rest}`;
  }

  /** The OpenClaw agent id of a service key. */
  openclawAgent(serviceKey: string): string | undefined {
    const p = parseSessionKey(serviceKey);
    return p ? (this.#from.get(p.agentId) ?? p.agentId) : undefined;
  }
}
