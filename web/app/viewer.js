// Who the page's token is (the viewer query, CLT-1): an admin reads everything; an
// agent-role token reads and acts for its own agent's sessions only, and the views say
// so instead of showing another agent's state as empty or failed.

import { gql } from './gql.js';

export class Viewer extends EventTarget {
  constructor(auth) {
    super();
    this.v = null; // {authenticated, admin, role, agentId, name} once known
    this.loading = null;
    if (auth) auth.addEventListener('token', () => this.load());
  }

  /** load asks the server who the token is; it never throws. */
  load() {
    if (this.loading) return this.loading;
    this.loading = (async () => {
      try {
        const d = await gql('query Viewer { viewer { authenticated admin role agentId name } }');
        this.v = d.viewer;
      } catch {
        // Unknown (refused, unreachable): the views act as for an admin and the
        // server's answers say the rest.
      } finally {
        this.loading = null;
        this.dispatchEvent(new Event('change'));
      }
    })();
    return this.loading;
  }

  /** agent returns the agent an agent-role token is limited to, or null. */
  agent() {
    return this.v && !this.v.admin ? this.v.agentId : null;
  }

  /** mayRead reports whether the token may read the sessions of agentId. */
  mayRead(agentId) {
    const a = this.agent();
    return !a || a === agentId;
  }

  /** label is the token's role and name for the header, '' without authentication. */
  label() {
    if (!this.v || !this.v.authenticated) return '';
    return this.v.name ? `${this.v.role} · ${this.v.name}` : this.v.role;
  }
}
