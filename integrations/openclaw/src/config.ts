// The plugin's config (plugins.entries.awareness.config in openclaw.json): checked
// whole before anything starts, each problem named by its path.
import { readFileSync } from 'node:fs';
import { isAbsolute } from 'node:path';
import type { SafeParse } from './openclaw.js';

/** mirror records OpenClaw's session events; inject also puts the service's notices into prompts. */
export type Mode = 'mirror' | 'inject';

export interface Config {
  /** The service's GraphQL endpoint, e.g. http://127.0.0.1:8080/query. */
  url: string;
  /** A file holding the bearer token (a service with --auth-file); read when the plugin starts. */
  tokenFile?: string;
  mode: Mode;
  /**
   * Watcher naming: OpenClaw agent id → the agent id the service knows the sessions
   * under (e.g. {"main": "alice"}: agent:main:main is agent:alice:main in the
   * service). Agents not named keep their id. One-to-one.
   */
  agentIds: Record<string, string>;
  /** The outbox file; default <OpenClaw state dir>/awareness/outbox. */
  outbox?: string;
  /** Inject: the most characters of notices one prompt gets (the rest waits for the next). */
  maxNoticeChars: number;
  /** Inject: wake an idle main session when a wake notice opens (NTC-6). */
  wake: boolean;
}

/** The keys of the config; anything else is refused. */
export const CONFIG_KEYS = ['url', 'tokenFile', 'mode', 'agentIds', 'outbox', 'maxNoticeChars', 'wake'] as const;

const agentIdRe = /^[a-z0-9][a-z0-9_-]{0,63}$/;

/** The JSON Schema of the config, as the manifest declares it. */
export const configJsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['url'],
  properties: {
    url: { type: 'string', description: 'The awareness service GraphQL endpoint, e.g. http://127.0.0.1:8080/query.' },
    tokenFile: { type: 'string', description: 'Absolute path of a file holding the bearer token.' },
    mode: { type: 'string', enum: ['mirror', 'inject'], default: 'mirror' },
    agentIds: { type: 'object', additionalProperties: { type: 'string' }, description: 'OpenClaw agent id -> the service agent id.' },
    outbox: { type: 'string', description: 'Absolute path of the outbox file.' },
    maxNoticeChars: { type: 'integer', minimum: 200, maximum: 100000, default: 9000 },
    wake: { type: 'boolean', default: true },
  },
} as const;

type Issue = { path: (string | number)[]; message: string };

/** Checks raw (the plugin's config object) and returns the config, or every problem in it. */
export function parseConfig(raw: unknown): SafeParse<Config> {
  const issues: Issue[] = [];
  const bad = (path: (string | number)[], message: string) => issues.push({ path, message });
  if (raw === undefined || raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    return { success: false, error: { issues: [{ path: [], message: 'awareness: the plugin needs a config object with at least "url" (the service\'s GraphQL endpoint)' }] } };
  }
  const r = raw as Record<string, unknown>;
  for (const k of Object.keys(r)) {
    if (!(CONFIG_KEYS as readonly string[]).includes(k)) bad([k], `awareness: unknown config key "${k}"; the keys are ${CONFIG_KEYS.join(', ')}`);
  }
  let url = '';
  if (typeof r.url !== 'string' || r.url.trim() === '') {
    bad(['url'], 'awareness: "url" is required: the service\'s GraphQL endpoint, e.g. http://127.0.0.1:8080/query');
  } else {
    try {
      const u = new URL(r.url);
      if (u.protocol !== 'http:' && u.protocol !== 'https:') bad(['url'], `awareness: "url" ${r.url}: want an http:// or https:// URL`);
      else url = u.toString();
    } catch {
      bad(['url'], `awareness: "url" ${JSON.stringify(r.url)} is not a URL; want e.g. http://127.0.0.1:8080/query`);
    }
  }
  const mode = r.mode ?? 'mirror';
  if (mode !== 'mirror' && mode !== 'inject') bad(['mode'], `awareness: "mode" ${JSON.stringify(r.mode)}: want "mirror" (record only, the default) or "inject" (also put notices into prompts)`);
  for (const k of ['tokenFile', 'outbox'] as const) {
    if (r[k] === undefined) continue;
    if (typeof r[k] !== 'string' || !isAbsolute(r[k] as string)) bad([k], `awareness: "${k}" must be an absolute file path`);
  }
  if (typeof r.tokenFile === 'string' && isAbsolute(r.tokenFile)) {
    try {
      if (readFileSync(r.tokenFile, 'utf8').trim() === '') bad(['tokenFile'], `awareness: "tokenFile" ${r.tokenFile} is empty`);
    } catch (e) {
      bad(['tokenFile'], `awareness: "tokenFile" ${r.tokenFile} cannot be read: ${(e as Error).message}`);
    }
  }
  const agentIds: Record<string, string> = {};
  if (r.agentIds !== undefined) {
    if (typeof r.agentIds !== 'object' || r.agentIds === null || Array.isArray(r.agentIds)) {
      bad(['agentIds'], 'awareness: "agentIds" must map OpenClaw agent ids to service agent ids, e.g. {"main": "alice"}');
    } else {
      const seen = new Map<string, string>();
      for (const [from, to] of Object.entries(r.agentIds)) {
        if (!agentIdRe.test(from)) bad(['agentIds', from], `awareness: "agentIds" key "${from}" is not an agent id ([a-z0-9][a-z0-9_-]{0,63})`);
        if (typeof to !== 'string' || !agentIdRe.test(to)) {
          bad(['agentIds', from], `awareness: "agentIds.${from}" ${JSON.stringify(to)} is not an agent id ([a-z0-9][a-z0-9_-]{0,63})`);
          continue;
        }
        const other = seen.get(to);
        if (other !== undefined) bad(['agentIds', from], `awareness: "agentIds" maps both "${other}" and "${from}" to "${to}"; each service agent id names one OpenClaw agent`);
        seen.set(to, from);
        agentIds[from] = to;
      }
    }
  }
  const maxNoticeChars = r.maxNoticeChars ?? 9000;
  if (typeof maxNoticeChars !== 'number' || !Number.isInteger(maxNoticeChars) || maxNoticeChars < 200 || maxNoticeChars > 100_000) {
    bad(['maxNoticeChars'], `awareness: "maxNoticeChars" ${JSON.stringify(r.maxNoticeChars)}: want an integer from 200 to 100000`);
  }
  const wake = r.wake ?? true;
  if (typeof wake !== 'boolean') bad(['wake'], `awareness: "wake" ${JSON.stringify(r.wake)}: want true or false`);
  if (issues.length) return { success: false, error: { issues } };
  return {
    success: true,
    data: {
      url, mode: mode as Mode, agentIds, maxNoticeChars: maxNoticeChars as number, wake: wake as boolean,
      ...(typeof r.tokenFile === 'string' ? { tokenFile: r.tokenFile } : {}),
      ...(typeof r.outbox === 'string' ? { outbox: r.outbox } : {}),
    },
  };
}

/** The message of a failed parse: every issue, one per line. */
export function configError(issues: Issue[]): string {
  return issues.map((i) => i.message).join('\n');
}
