// The GraphQL-over-HTTP audit suite (npm graphql-http, serverAudits) against a running
// server, for the end-to-end tests.
//
//   node audit.mjs <http-url> [token]
//
// It prints one JSON object: {"must":{"ok":n,"failed":n},"should":{…},"may":{…},
// "failures":[{"id","name","reason"}…]} and exits 0 (the Go test judges the counts).
import { auditServer } from 'graphql-http';

const [url, token] = process.argv.slice(2);
const fetchFn = token
  ? (input, init = {}) => fetch(input, { ...init, headers: { ...Object.fromEntries(new Headers(init.headers || {})), authorization: `Bearer ${token}` } })
  : fetch;
const results = await auditServer({ url, fetchFn });
const out = { must: { ok: 0, failed: 0 }, should: { ok: 0, failed: 0 }, may: { ok: 0, failed: 0 }, failures: [] };
for (const r of results) {
  const level = r.name.startsWith('MUST') ? 'must' : r.name.startsWith('SHOULD') ? 'should' : 'may';
  if (r.status === 'ok') {
    out[level].ok++;
  } else {
    out[level].failed++;
    out.failures.push({ id: r.id, name: r.name, reason: r.reason });
  }
}
console.log(JSON.stringify(out));
