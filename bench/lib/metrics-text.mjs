// The Prometheus text of a server's /metrics, as the benches read it: one Map of every sample,
// keyed by its series as it stands in the text (`name` or `name{label="value",...}`).

/** Prometheus text -> Map of "name{labels}" -> value. */
export function parseMetrics(text) {
  const out = new Map();
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || line === '') continue;
    const i = line.lastIndexOf(' ');
    out.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return out;
}

/** GET `<url>/metrics`, parsed by {@link parseMetrics}. */
export async function scrapeMetrics(url) {
  return parseMetrics(await (await fetch(`${url}/metrics`)).text());
}

/** The samples of metric `name` (its series with labels): `[labels text, value]` in text order. */
export function seriesOf(metrics, name) {
  const out = [];
  for (const [key, value] of metrics) if (key.startsWith(`${name}{`)) out.push([key.slice(name.length + 1, -1), value]);
  return out;
}
