// The text a prompt gets for the notices drained for it: the same form as the hook
// command's (internal/hook), so an agent reads one shape whichever harness it runs in.
import type { Notice } from '@awareness/client';

/** The first line of every injected text: what the lines below are. */
export const HEADER = '[awareness] Another actor changed sessions this session depends on. Reconcile each before acting on it:';

// Room kept for the digest line.
const digestReserve = 200;

/**
 * How many of ns, from the first, render() prints within limit characters, the
 * digest line included when some are left out. At least one always fits.
 */
export function fit(ns: Notice[], limit: number): number {
  let size = HEADER.length;
  for (let i = 0; i < ns.length; i++) {
    size += 1 + ns[i].text.length;
    const reserve = i < ns.length - 1 ? digestReserve : 0;
    if (size + reserve > limit && i > 0) return i;
  }
  return ns.length;
}

/** The header, each notice's exact text (NTC-1) on a line of its own, and the digest line when more are pending. */
export function render(shown: Notice[], more: number): string {
  const lines = [HEADER, ...shown.map((n) => n.text)];
  if (more > 0) {
    lines.push(`[awareness] ${more} more stale-session ${more === 1 ? 'notice is' : 'notices are'} pending and will be shown next.`);
  }
  return lines.join('\n');
}
