/**
 * The dashboard's HTML page (`GET /dashboard`). Its script (`/viewer/dashboard.js`, compiled
 * from the viewer's `src/browser/dashboard.ts`) polls `/dashboard/data` once a second and draws
 * the charts with uPlot, which an import map points at the package's ESM file served under
 * `/viewer/uplot/` (its stylesheet beside it) — no bundler, no CDN.
 */
import { createHash } from 'node:crypto';
import { DASHBOARD_METRICS as M } from './dashboard.js';

/** The charts of the page, in order: id (the `<chart>/` of its series), title, what the axis counts, the metric it reads. */
export const DASHBOARD_CHARTS = [
  { id: 'fps', title: 'Frames per second, per track', unit: 'fps', metric: M.framesEmitted },
  { id: 'step', title: 'Step time', unit: 'ms', metric: M.stepSeconds },
  { id: 'c2p', title: 'Command to pixel', unit: 'ms', metric: M.commandToPixel },
  { id: 'stage', title: 'Step stages (mean)', unit: 'ms', metric: M.stageSeconds },
  { id: 'delivery', title: 'Frames delivered and dropped', unit: 'frames/s', metric: M.framesSent },
  { id: 'clients', title: 'Clients', unit: 'clients', metric: M.clients },
  { id: 'gpu', title: 'GPU busy per rank', unit: '%', metric: M.gpuBusy },
  { id: 'viewer', title: 'Viewer freezes and drops', unit: 'per s', metric: M.freezes },
] as const;

const CSS = `
:root { color-scheme: dark; --bg:#0f1115; --panel:#171a21; --line:#262b36; --text:#e6e9ef; --muted:#8b93a7;
  --accent:#6aa6ff; --ok:#52c98a; --warn:#e6b450; --err:#ff6b6b; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--text); }
header { display:flex; align-items:center; gap:12px; padding:10px 18px; border-bottom:1px solid var(--line); background:var(--panel); flex-wrap:wrap; }
header h1 { font-size:16px; margin:0; font-weight:600; }
header .muted, .muted { color:var(--muted); font-size:12px; }
.badge { padding:2px 9px; border-radius:999px; font-size:12px; border:1px solid var(--line); color:var(--muted); white-space:nowrap; }
.badge.ok { color:var(--ok); } .badge.warn { color:var(--warn); } .badge.err { color:var(--err); }
.spacer { flex:1; }
main { padding:18px; max-width:1500px; margin:0 auto; display:flex; flex-direction:column; gap:18px; }
.tiles { display:flex; flex-wrap:wrap; gap:12px; }
.tile { background:var(--panel); border:1px solid var(--line); border-radius:10px; padding:10px 14px; min-width:170px; }
.tile .label { color:var(--muted); font-size:12px; }
.tile .value { font-size:20px; font-weight:600; font-variant-numeric: tabular-nums; }
.grid { display:grid; grid-template-columns: repeat(auto-fill, minmax(460px, 1fr)); gap:18px; }
section.card { background:var(--panel); border:1px solid var(--line); border-radius:10px; padding:12px 14px; position:relative; min-width:0; }
section.card h2 { font-size:12px; text-transform:uppercase; letter-spacing:.06em; color:var(--muted); margin:0 0 8px; font-weight:600; }
.chart { height:220px; }
.nodata { position:absolute; inset:40px 14px 14px; display:flex; align-items:center; justify-content:center; color:var(--muted); font-size:13px; margin:0; }
.nodata[hidden] { display:none; }
table { width:100%; border-collapse:collapse; font-size:12px; font-variant-numeric: tabular-nums; }
th, td { text-align:left; padding:4px 8px; border-top:1px solid var(--line); overflow-wrap:anywhere; }
th { color:var(--muted); font-weight:600; border-top:none; }
td.error { color:var(--err); } td.warn { color:var(--warn); }
.u-legend { font-size:12px; color:var(--text); }
`;

/** The page's one inline script: the import map (its hash is allowed by the CSP), for the page's base path. */
const importMap = (basePath = ''): string => JSON.stringify({ imports: { uplot: `${basePath}/viewer/uplot/uPlot.esm.js` } });

const sha256 = (text: string): string => `'sha256-${createHash('sha256').update(text).digest('base64')}'`;

/**
 * The dashboard's security headers: only this server's scripts, styles and data (the inline
 * import map and style by hash), no frames of it on other pages, no referrer (the URL may carry
 * `?token=`).
 */
export function dashboardSecurityHeaders(basePath = ''): Record<string, string> {
  const csp = [
    "default-src 'none'",
    `script-src 'self' ${sha256(importMap(basePath))}`,
    `style-src 'self' ${sha256(CSS)}`,
    "img-src 'self' data:",
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
  return { 'Content-Security-Policy': csp, 'Referrer-Policy': 'no-referrer' };
}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

/** Renders the dashboard page of an app. */
export function renderDashboardPage(o: { title: string; basePath?: string }): string {
  const title = escapeHtml(o.title);
  const base = o.basePath ?? '';
  const config = JSON.stringify({ dataPath: `${base}/dashboard/data`, charts: DASHBOARD_CHARTS }).replace(/</g, '\\u003c');
  const charts = DASHBOARD_CHARTS.map(
    (c) =>
      `<section class="card" id="card-${c.id}"><h2>${escapeHtml(c.title)} <span class="muted">(${escapeHtml(c.unit)})</span></h2>` +
      `<div class="chart" id="chart-${c.id}"></div><p class="nodata" id="nodata-${c.id}">no data yet</p></section>`,
  ).join('\n    ');
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · dashboard · Reactor</title>
<link rel="stylesheet" href="${escapeHtml(base)}/viewer/uplot/uPlot.min.css">
<style>${CSS}</style>
<script type="importmap">${importMap(base)}</script>
<script id="dashboard-config" type="application/json">${config}</script>
</head>
<body>
<header>
  <h1>${title}</h1><span class="muted">dashboard · last 10 minutes</span>
  <span class="spacer"></span>
  <span class="badge" id="session">session: -</span>
  <span class="badge" id="poll">connecting</span>
  <span class="muted" id="cost" title="the server's cost of one sample (once a second), median of the last 10 minutes">sampling -</span>
</header>
<main>
  <div class="tiles">
    <div class="tile"><div class="label">clients</div><div class="value" id="tile-clients">-</div></div>
    <div class="tile"><div class="label">time to first frame p50 / p99</div><div class="value" id="tile-first-frame">no data yet</div></div>
    <div class="tile"><div class="label">load progress</div><div class="value" id="tile-load">no data yet</div></div>
  </div>
  <div class="grid">
    ${charts}
  </div>
  <section class="card"><h2>Clients</h2>
    <table id="clients"><thead><tr><th>id</th><th>role</th><th>transport</th><th>codec</th><th>tier</th><th>frames sent</th><th>dropped</th><th>buffered</th><th>connected</th></tr></thead><tbody><tr><td colspan="9" class="muted">no clients</td></tr></tbody></table>
  </section>
  <section class="card"><h2>Recent errors and warnings</h2>
    <table id="events"><thead><tr><th>time</th><th>level</th><th>source</th><th>code</th><th>message</th><th>count</th></tr></thead><tbody><tr><td colspan="6" class="muted">none</td></tr></tbody></table>
  </section>
</main>
<script type="module" src="${escapeHtml(base)}/viewer/dashboard.js"></script>
</body>
</html>
`;
}
