/**
 * The live dashboard (`/dashboard`): polls `/dashboard/data` once a second (after the first
 * answer only the samples it does not have yet, `?since=`), keeps the last ten minutes and draws
 * one uPlot chart per group of series (`fps/…`, `step/…`, …); a chart without any point says
 * "no data yet" (and which metric this server lacks, when it lacks it). Below: the clients and
 * the server's recent errors and warnings.
 */
import uPlot from 'uplot';
import type { DashboardData as Data } from '@reactor/protocol';

interface ChartSpec {
  id: string;
  title: string;
  unit: string;
  metric: string;
}

const $ = <T extends HTMLElement>(id: string): T => document.getElementById(id) as T;
const config = JSON.parse($('dashboard-config').textContent ?? '{}') as { dataPath: string; charts: ChartSpec[] };
const COLORS = ['#6aa6ff', '#52c98a', '#e6b450', '#ff6b6b', '#c792ea', '#4dd0e1', '#f78c6c', '#a3be8c', '#d08770'];

/** The samples the page has: times and one array per series, aligned. */
class Store {
  t: number[] = [];
  readonly series = new Map<string, (number | null)[]>();
  max = 600;

  merge(d: Data): void {
    this.max = Math.round((d.historyS * 1000) / d.intervalMs);
    const before = this.t.length;
    for (const k of Object.keys(d.series)) if (!this.series.has(k)) this.series.set(k, new Array<number | null>(before).fill(null));
    this.t.push(...d.t);
    for (const [k, arr] of this.series) arr.push(...(d.series[k] ?? new Array<null>(d.t.length).fill(null)));
    const extra = this.t.length - this.max;
    if (extra > 0) {
      this.t.splice(0, extra);
      for (const arr of this.series.values()) arr.splice(0, extra);
    }
  }

  keys(chart: string): string[] {
    return [...this.series.keys()].filter((k) => k.startsWith(`${chart}/`)).sort();
  }
}

const store = new Store();
const plots = new Map<string, { plot: uPlot; keys: string }>();
let absent: string[] = [];
let polls = 0;
let lastError = '';

function axis(unit: string): uPlot.Axis {
  return { stroke: '#8b93a7', grid: { stroke: '#262b36', width: 1 }, ticks: { stroke: '#262b36', width: 1 }, label: unit, labelSize: 18, size: 56 };
}

function drawChart(spec: ChartSpec): void {
  const box = $('chart-' + spec.id);
  const nodata = $('nodata-' + spec.id);
  const keys = store.keys(spec.id);
  const hasPoints = keys.some((k) => store.series.get(k)!.some((v) => v !== null));
  nodata.hidden = hasPoints;
  nodata.textContent = absent.includes(spec.metric) ? `no data yet (this server has no ${spec.metric})` : 'no data yet';
  const current = plots.get(spec.id);
  if (!hasPoints) {
    current?.plot.destroy();
    plots.delete(spec.id);
    return;
  }
  const data = [store.t, ...keys.map((k) => store.series.get(k)!)] as uPlot.AlignedData;
  if (current && current.keys === keys.join('\n')) {
    current.plot.setData(data);
    return;
  }
  current?.plot.destroy();
  // Sparse series (a figure only when something was observed) are drawn as points joined over gaps.
  const sparse = spec.id === 'c2p' || spec.id === 'stage' || spec.id === 'step';
  const opts: uPlot.Options = {
    width: Math.max(200, box.clientWidth),
    height: 220,
    scales: { x: { time: true } },
    legend: { live: false },
    cursor: { drag: { x: false, y: false } },
    axes: [axis(''), axis(spec.unit)],
    series: [
      {},
      ...keys.map((k, i) => ({
        label: k.slice(spec.id.length + 1),
        stroke: COLORS[i % COLORS.length]!,
        width: 1.5,
        spanGaps: sparse,
        points: { show: sparse, size: 4 },
      })),
    ],
  };
  plots.set(spec.id, { plot: new uPlot(opts, data, box), keys: keys.join('\n') });
}

function cell(text: string, cls = ''): HTMLTableCellElement {
  const td = document.createElement('td');
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function fillTable(id: string, rows: HTMLTableCellElement[][], empty: string, columns: number): void {
  const body = $(id).querySelector('tbody')!;
  const trs = rows.map((cells) => {
    const tr = document.createElement('tr');
    tr.append(...cells);
    return tr;
  });
  if (trs.length === 0) {
    const tr = document.createElement('tr');
    const td = cell(empty, 'muted');
    td.colSpan = columns;
    tr.append(td);
    trs.push(tr);
  }
  body.replaceChildren(...trs);
}

const bytes = (n: number): string => (n < 1024 ? `${n} B` : n < 1024 * 1024 ? `${(n / 1024).toFixed(1)} KB` : `${(n / 1024 / 1024).toFixed(1)} MB`);
const duration = (s: number): string => (s < 60 ? `${s} s` : s < 3600 ? `${Math.floor(s / 60)} min ${s % 60} s` : `${(s / 3600).toFixed(1)} h`);

function render(d: Data): void {
  absent = d.absent;
  for (const spec of config.charts) drawChart(spec);
  const s = d.now.session;
  const badge = $('session');
  badge.textContent = `session: ${s.refused !== undefined ? 'not stepping' : s.state} · ${s.clients} client${s.clients === 1 ? '' : 's'}`;
  badge.className = `badge ${s.state === 'failed' ? 'err' : s.refused !== undefined || s.state === 'loading' ? 'warn' : 'ok'}`;
  $('cost').textContent = `sampling ${d.now.sampleCostUs.p50.toFixed(0)} µs/s`;
  $('tile-clients').textContent = String(d.now.clients.length);
  const ff = d.now.firstFrameMs;
  $('tile-first-frame').textContent = ff === null || ff.count === 0 ? 'no data yet' : `${ff.p50?.toFixed(0)} / ${ff.p99?.toFixed(0)} ms (${ff.count})`;
  $('tile-load').textContent = d.now.loadProgress === null ? 'no data yet' : `${Math.round(d.now.loadProgress * 100)} %`;
  fillTable(
    'clients',
    d.now.clients.map((c) => [
      cell(c.id),
      cell(c.role),
      cell(c.transport),
      cell(c.codec),
      cell(c.tier),
      cell(String(c.framesSent)),
      cell(String(c.framesDropped)),
      cell(bytes(c.bufferedBytes)),
      cell(duration(c.connectedS)),
    ]),
    'no clients',
    9,
  );
  fillTable(
    'events',
    d.events.map((e) => [
      cell(new Date(e.t).toLocaleTimeString()),
      cell(e.level, e.level),
      cell(e.source),
      cell(e.code ?? ''),
      cell(e.message),
      cell(String(e.count)),
    ]),
    'none',
    6,
  );
}

async function poll(): Promise<void> {
  const since = store.t[store.t.length - 1];
  const url = since === undefined ? config.dataPath : `${config.dataPath}?since=${since}`;
  const badge = $('poll');
  try {
    const res = await fetch(url, { cache: 'no-store', credentials: 'same-origin' });
    if (!res.ok) {
      const body = (await res.json().catch(() => ({}))) as { error?: { code?: string; message?: string } };
      throw new Error(`${res.status} ${body.error?.code ?? ''}: ${body.error?.message ?? res.statusText}`);
    }
    const d = (await res.json()) as Data;
    store.merge(d);
    render(d);
    polls++;
    badge.textContent = 'live';
    badge.className = 'badge ok';
    lastError = '';
  } catch (err) {
    lastError = (err as Error).message;
    badge.textContent = `no data: ${lastError}`;
    badge.className = 'badge err';
  }
  setTimeout(() => void poll(), 1000);
}

new ResizeObserver(() => {
  for (const spec of config.charts) {
    const p = plots.get(spec.id);
    if (p) p.plot.setSize({ width: Math.max(200, $('chart-' + spec.id).clientWidth), height: 220 });
  }
}).observe(document.body);

/** What tests and curious operators read: each drawn chart's series and points. */
(window as unknown as { reactorDashboard: unknown }).reactorDashboard = {
  get polls() {
    return polls;
  },
  get lastError() {
    return lastError;
  },
  charts(): Record<string, { series: string[]; points: number }> {
    const out: Record<string, { series: string[]; points: number }> = {};
    for (const [id, p] of plots) {
      const series = p.keys.split('\n');
      out[id] = { series, points: series.reduce((n, k) => n + store.series.get(k)!.filter((v) => v !== null).length, 0) };
    }
    return out;
  },
};

void poll();
