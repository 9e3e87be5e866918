/**
 * Who may reach a served app: the `allowedHosts` / `allowedOrigins` lists as `reactor run`
 * takes them (`--allowed-host`, `--allowed-origin`, repeatable or comma-separated) and as
 * `reactor.yaml`'s `server:` section gives them, each entry checked with a message that says
 * what a valid one looks like.
 */

const HOST_NAME = /^(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*$/i;
const IPV6 = /^\[[0-9a-f:.]+\]$/i;

/** What is wrong with one `allowedHosts` entry, or `undefined` when it is fine. */
export function hostProblem(value: string): string | undefined {
  if (value === '*' || HOST_NAME.test(value) || IPV6.test(value)) return undefined;
  return `${JSON.stringify(value)} is not a host name: give the name alone, without scheme or port (e.g. reactor.example.com, 10.0.0.5, [::1]), or * for any`;
}

/** What is wrong with one `allowedOrigins` entry, or `undefined` when it is fine. */
export function originProblem(value: string): string | undefined {
  if (value === '*') return undefined;
  const bad = `${JSON.stringify(value)} is not an origin: give scheme, host and optional port, without a path (e.g. https://app.example.com, http://localhost:5173), or * for any`;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return bad;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return bad;
  if (url.origin.toLowerCase() !== value.replace(/\/$/, '').toLowerCase()) return bad;
  return undefined;
}

/** Splits repeated and comma-separated flag values into one list (empty entries dropped). */
export function flagList(value: unknown): string[] | undefined {
  if (value === undefined) return undefined;
  const values = Array.isArray(value) ? value : [value];
  return values
    .flatMap((v) => String(v).split(','))
    .map((v) => v.trim())
    .filter((v) => v !== '');
}

/**
 * Every problem of a list, each prefixed with where it came from (`--allowed-host`,
 * `server.allowed_hosts[1]`).
 */
export function listProblems(list: readonly string[], check: (v: string) => string | undefined, where: (index: number) => string): string[] {
  return list.flatMap((v, i) => {
    const p = check(v);
    return p === undefined ? [] : [`${where(i)}: ${p}`];
  });
}
