/**
 * How the dashboard reads the server's prom-client registry: metrics by name (other parts of the
 * server, and other issues, add theirs; an absent one reads as absent, never as an error), and
 * per-interval figures from cumulative counters and histograms (a rate, a mean, a quantile of
 * what was observed since the last sample).
 */
import type { Registry } from 'prom-client';

/** One value of a metric, as prom-client gives it. */
interface Value {
  labels: Record<string, string | number | undefined>;
  value: number;
  metricName?: string;
}

/** A metric's values by series (its labels), as read at one sample. */
export type Reading = Map<string, number>;

/** A histogram's cumulative state, per label set (the labels other than `le`). */
export interface HistogramReading {
  /** Upper bounds, ascending (`+Inf` last). */
  bounds: number[];
  series: Map<string, { buckets: number[]; sum: number; count: number }>;
}

/** The label set of a value as a stable key (`a=1,b=2`, sorted; '' for none), `le` left out. */
export function labelKey(labels: Value['labels'], without = 'le'): string {
  return Object.keys(labels)
    .filter((k) => k !== without && labels[k] !== undefined)
    .sort()
    .map((k) => `${k}=${String(labels[k])}`)
    .join(',');
}

/** The value of one label in a key made by {@link labelKey}. */
export function labelOf(key: string, name: string): string | undefined {
  for (const part of key.split(',')) {
    const eq = part.indexOf('=');
    if (part.slice(0, eq) === name) return part.slice(eq + 1);
  }
  return undefined;
}

/** Reads one metric's values by name; `undefined` when no metric of that name is registered. */
async function values(registry: Registry, name: string): Promise<Value[] | undefined> {
  const metric = registry.getSingleMetric(name);
  if (!metric) return undefined;
  const got = await metric.get();
  return got.values as Value[];
}

/** A counter's or gauge's values by label key; `undefined` when the metric is absent. */
export async function readScalar(registry: Registry, name: string): Promise<Reading | undefined> {
  const vs = await values(registry, name);
  if (!vs) return undefined;
  const out: Reading = new Map();
  for (const v of vs) out.set(labelKey(v.labels, ''), v.value);
  return out;
}

/** What a prom-client 15 `Histogram` keeps per label set (non-cumulative counts by upper bound). */
interface HistogramInternals {
  upperBounds: readonly number[];
  hashMap: Record<string, { labels: Value['labels']; bucketValues: Record<string, number>; sum: number; count: number }>;
  collect?: () => unknown;
}

/** The histogram's own per-series state, when it has prom-client 15's layout; else undefined. */
function internals(metric: unknown): HistogramInternals | undefined {
  const h = metric as Partial<HistogramInternals> | undefined;
  return Array.isArray(h?.upperBounds) && typeof h.hashMap === 'object' && h.hashMap !== null ? (h as HistogramInternals) : undefined;
}

/**
 * A histogram's cumulative buckets, sum and count by label key; `undefined` when absent.
 *
 * prom-client's `get()` builds one labelled object per bucket of every series (1.1-1.3 ms for
 * 20 series of 13 buckets on the loaded 2-core dev machine, against 0.2-0.23 ms read as below): read once a second that would be most of the dashboard's
 * cost. So a histogram with prom-client 15's own layout (`upperBounds`, `hashMap`) is read from
 * it, after its `collect` as `get()` would; anything else through `get()` (`viaGet` forces it).
 */
export async function readHistogram(registry: Registry, name: string, viaGet = false): Promise<HistogramReading | undefined> {
  const metric = registry.getSingleMetric(name);
  if (!metric) return undefined;
  const own = viaGet ? undefined : internals(metric);
  if (own) {
    if (typeof own.collect === 'function') await own.collect();
    const series = new Map<string, { buckets: number[]; sum: number; count: number }>();
    for (const e of Object.values(own.hashMap)) {
      let acc = 0;
      const buckets = own.upperBounds.map((b) => (acc += e.bucketValues[b] ?? 0));
      buckets.push(e.count);
      series.set(labelKey(e.labels), { buckets, sum: e.sum, count: e.count });
    }
    return { bounds: [...own.upperBounds, Infinity], series };
  }
  const vs = await values(registry, name);
  if (!vs) return undefined;
  const bounds: number[] = [];
  const series = new Map<string, { buckets: number[]; sum: number; count: number }>();
  const entry = (key: string): { buckets: number[]; sum: number; count: number } => {
    let e = series.get(key);
    if (!e) series.set(key, (e = { buckets: [], sum: 0, count: 0 }));
    return e;
  };
  for (const v of vs) {
    const key = labelKey(v.labels);
    const kind = v.metricName?.slice(name.length);
    if (kind === '_bucket') {
      const le = v.labels['le'];
      const bound = le === '+Inf' ? Infinity : Number(le);
      const e = entry(key);
      // prom-client lists each series' buckets in ascending order.
      if (e.buckets.length === bounds.length) bounds.push(bound);
      e.buckets.push(v.value);
    } else if (kind === '_sum') entry(key).sum = v.value;
    else if (kind === '_count') entry(key).count = v.value;
  }
  return { bounds, series };
}

/** `now - before`, or `now` when the counter went back (a reset). */
const delta = (now: number, before: number | undefined): number => (before === undefined || now < before ? now : now - before);

/** Per series, what a counter rose by since `before` (a series new since then counts whole). */
export function counterDeltas(now: Reading, before: Reading | undefined): Map<string, number> {
  const out = new Map<string, number>();
  for (const [k, v] of now) out.set(k, delta(v, before?.get(k)));
  return out;
}

/** What a histogram observed since `before`, summed over the series `pick` keeps (all by default). */
export function histogramDelta(
  now: HistogramReading,
  before: HistogramReading | undefined,
  pick: (key: string) => boolean = () => true,
): { buckets: number[]; sum: number; count: number } {
  const buckets = now.bounds.map(() => 0);
  let sum = 0;
  let count = 0;
  for (const [key, s] of now.series) {
    if (!pick(key)) continue;
    const b = before?.series.get(key);
    const reset = b !== undefined && s.count < b.count;
    const prev = reset ? undefined : b;
    count += s.count - (prev?.count ?? 0);
    sum += s.sum - (prev?.sum ?? 0);
    s.buckets.forEach((c, i) => (buckets[i] = buckets[i]! + c - (prev?.buckets[i] ?? 0)));
  }
  return { buckets, sum, count };
}

/**
 * The `q` quantile (0..1) of what cumulative `buckets` (ascending `bounds`) counted, by linear
 * interpolation inside the bucket it falls in (Prometheus's `histogram_quantile`); the largest
 * finite bound when it falls in `+Inf`; `null` for an empty histogram.
 */
export function bucketQuantile(bounds: readonly number[], buckets: readonly number[], q: number): number | null {
  const total = buckets[buckets.length - 1] ?? 0;
  if (total <= 0) return null;
  const rank = q * total;
  for (let i = 0; i < buckets.length; i++) {
    if (buckets[i]! < rank) continue;
    const upper = bounds[i]!;
    if (upper === Infinity) return bounds[i - 1] ?? null;
    const lower = i === 0 ? 0 : bounds[i - 1]!;
    const below = i === 0 ? 0 : buckets[i - 1]!;
    const inBucket = buckets[i]! - below;
    return inBucket <= 0 ? upper : lower + (upper - lower) * ((rank - below) / inBucket);
  }
  return bounds[bounds.length - 2] ?? null;
}
