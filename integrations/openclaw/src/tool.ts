// awareness_status: the reconcile tool the service's notices name inside OpenClaw
// (the deployment runs the service with --notice-tool awareness_status, NTC-1), since
// OpenClaw's own session_status reads OpenClaw's log and a plugin may not take its name.
import { AwarenessError, Codes, type Client } from '@awareness/client';
import type { AgentTool, ToolResult } from './openclaw.js';

export const TOOL_NAME = 'awareness_status';

const statusQuery = `query($k: String!, $a: String, $s: Int) { sessionStatus(sessionKey: $k, agentId: $a, changesSince: $s, limit: 200) {
  sessionKey stateVersion stateChanges { events { sequence kind actorType summary } historyGap truncated nextChangesSince } } }`;

export const toolParameters = {
  type: 'object',
  additionalProperties: false,
  required: ['sessionKey'],
  properties: {
    sessionKey: { type: 'string', description: 'The session the notice names, exactly as written there.' },
    changesSince: { type: 'integer', minimum: 0, description: 'The version the notice names: the changes after it are returned.' },
    agentId: { type: 'string', description: 'Only when the notice names one (a bare session key).' },
  },
};

function text(v: unknown): ToolResult {
  return { content: [{ type: 'text', text: JSON.stringify(v, null, 2) }], details: v };
}

/** The tool over the awareness service's sessionStatus (REC-1..4): reads, moves no cursor. */
export function statusTool(client: () => Client): AgentTool {
  return {
    name: TOOL_NAME,
    label: 'Awareness status',
    description:
      'Reconcile with a session another actor changed: call it when an [awareness] notice says a session changed, with the ' +
      'sessionKey and changesSince the notice names, before acting on that session. Returns the session\'s stateVersion and ' +
      'the changes after changesSince (kind, actor, one-line summary, never message content). historyGap or fullRefresh ' +
      'true means the delta is incomplete: read the whole session instead.',
    parameters: toolParameters,
    async execute(_id, params) {
      const sessionKey = typeof params.sessionKey === 'string' ? params.sessionKey : '';
      if (!sessionKey) throw new Error('awareness_status: sessionKey is required (the session the notice names)');
      const since = params.changesSince;
      if (since !== undefined && (typeof since !== 'number' || !Number.isInteger(since) || since < 0)) {
        throw new Error('awareness_status: changesSince must be a whole number ≥ 0 (the version the notice names)');
      }
      const agentId = typeof params.agentId === 'string' && params.agentId ? params.agentId : undefined;
      try {
        const data = await client().request(statusQuery, { k: sessionKey, a: agentId, s: since });
        const st = data.sessionStatus;
        return text({ ...st, fullRefresh: Boolean(st.stateChanges?.historyGap) });
      } catch (e) {
        if (e instanceof AwarenessError && e.code === Codes.CursorAhead) {
          return text({ sessionKey, fullRefresh: true, reason: "changesSince is ahead of the session's version: its history was reset or deleted; read the whole session" });
        }
        if (e instanceof AwarenessError) throw new Error(`awareness_status: ${e.code || 'no answer'}: ${e.detail}`);
        throw e;
      }
    },
  };
}
