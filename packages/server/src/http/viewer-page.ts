/**
 * The viewer's HTML page. Its script (`/viewer/app.js`, compiled from `viewer-app.ts`) imports
 * `@reactor/client`, which an import map points at the client SDK's compiled ESM served under
 * `/viewer/client/` — no bundler involved.
 */
import { createHash } from 'node:crypto';

/** What the page needs to know. */
export interface ViewerPageOptions {
  /** Shown as the page title and heading. */
  title: string;
  /** The server's WebSocket path. */
  wsPath: string;
  /**
   * The path the page is reached under, when a proxy serves it below a prefix (a session
   * router's `/s/{instance}`, from `X-Forwarded-Prefix`): its scripts, modules and socket are
   * asked for under it. Default: none (the server's root).
   */
  basePath?: string;
  /** The server keeps recordings (`recording:`): the page lists them; without, it asks for none. */
  recording?: boolean;
}

/** A safe `X-Forwarded-Prefix`: `/`-separated path segments of URL-safe characters, no trailing slash; anything else is ignored (''). */
export function viewerBasePath(header: string | string[] | undefined): string {
  const v = (Array.isArray(header) ? header[0] : header)?.trim().replace(/\/+$/, '') ?? '';
  return /^(\/[A-Za-z0-9._~%-]+)*$/.test(v) ? v : '';
}

const CSS = `
:root { color-scheme: dark; --bg:#0f1115; --panel:#171a21; --line:#262b36; --text:#e6e9ef; --muted:#8b93a7;
  --accent:#6aa6ff; --ok:#52c98a; --warn:#e6b450; --err:#ff6b6b; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--text); }
header { display:flex; align-items:center; gap:12px; padding:10px 18px; border-bottom:1px solid var(--line); background:var(--panel); }
header h1 { font-size:16px; margin:0; font-weight:600; }
header .version { color:var(--muted); font-size:12px; }
.badge { padding:2px 9px; border-radius:999px; font-size:12px; border:1px solid var(--line); color:var(--muted); white-space:nowrap; }
.badge.ok { color:var(--ok); border-color:color-mix(in srgb, var(--ok) 40%, transparent); }
.badge.warn { color:var(--warn); border-color:color-mix(in srgb, var(--warn) 40%, transparent); }
.badge.err { color:var(--err); border-color:color-mix(in srgb, var(--err) 40%, transparent); }
.spacer { flex:1; }
main { display:grid; grid-template-columns: minmax(0,1fr) 340px; gap:18px; padding:18px; max-width:1400px; margin:0 auto; }
@media (max-width: 900px) { main { grid-template-columns: 1fr; } }
.stage { background:#000; border:1px solid var(--line); border-radius:10px; overflow:hidden; display:flex; align-items:center; justify-content:center; aspect-ratio: 1 / 1; max-height: calc(100vh - 170px); }
.stage canvas { width:100%; height:100%; object-fit:contain; image-rendering:auto; display:block; }
.stage { position:relative; }
.stage-card { position:absolute; left:12px; right:12px; bottom:12px; max-height:calc(100% - 24px); overflow:auto; background:color-mix(in srgb, var(--panel) 92%, transparent); border:1px solid var(--line); border-radius:8px; padding:10px 12px; font-size:13px; white-space:pre-wrap; overflow-wrap:anywhere; }
.stage-card.warn { border-color:color-mix(in srgb, var(--warn) 50%, transparent); }
.stage-card.err { border-color:color-mix(in srgb, var(--err) 50%, transparent); color:var(--err); }
.stage-card[hidden] { display:none; }
.stats { display:flex; flex-wrap:wrap; gap:16px; margin-top:10px; color:var(--muted); font-size:12px; font-variant-numeric: tabular-nums; }
.stats b { color:var(--text); font-weight:600; }
.stats select { background:#0c0e12; color:var(--text); border:1px solid var(--line); border-radius:4px; font:inherit; padding:0 4px; }
aside { display:flex; flex-direction:column; gap:14px; }
section.panel { background:var(--panel); border:1px solid var(--line); border-radius:10px; padding:12px 14px; }
section.panel h2 { font-size:12px; text-transform:uppercase; letter-spacing:.06em; color:var(--muted); margin:0 0 10px; font-weight:600; }
.control { padding:8px 0; border-top:1px solid var(--line); }
.control:first-of-type { border-top:none; padding-top:0; }
.control label.name { display:flex; justify-content:space-between; gap:8px; font-weight:500; }
.control .wire { color:var(--muted); font-size:11px; font-weight:400; }
.control .desc { color:var(--muted); font-size:12px; margin:2px 0 6px; }
.control .desc code, .control .wire { font: 11px ui-monospace, SFMono-Regular, Menlo, monospace; }
.control .desc code { background:#0c0e12; border:1px solid var(--line); border-radius:4px; padding:0 3px; color:var(--text); }
.params .req { color:var(--err); }
.control .row { display:flex; gap:8px; align-items:center; }
.control input[type=text], .control input[type=number], .control select { flex:1; min-width:0; background:#0c0e12; color:var(--text); border:1px solid var(--line); border-radius:6px; padding:6px 8px; font:inherit; }
.control input[type=range] { flex:1; accent-color: var(--accent); }
.control .value { font-variant-numeric: tabular-nums; color:var(--muted); min-width:3em; text-align:right; }
button { background:var(--accent); color:#071022; border:none; border-radius:6px; padding:6px 12px; font:inherit; font-weight:600; cursor:pointer; }
button:hover { filter:brightness(1.1); }
button.secondary { background:transparent; color:var(--text); border:1px solid var(--line); }
.result { font-size:12px; margin-top:4px; min-height:1em; overflow-wrap:anywhere; }
.result.ok { color:var(--ok); }
.keys { flex-wrap:wrap; gap:6px; }
.keys kbd { font:12px ui-monospace, monospace; border:1px solid var(--line); border-radius:5px; padding:3px 6px; background:var(--panel); }
.keys kbd.held { border-color:var(--ok); color:var(--ok); }
.result.err { color:var(--err); }
.toggle { position:relative; width:40px; height:22px; flex:none; }
.toggle input { opacity:0; width:0; height:0; }
.toggle span { position:absolute; inset:0; background:#2a3040; border-radius:999px; transition:.15s; cursor:pointer; }
.toggle span::before { content:""; position:absolute; width:16px; height:16px; left:3px; top:3px; background:var(--text); border-radius:50%; transition:.15s; }
.toggle input:checked + span { background:var(--accent); }
.toggle input:checked + span::before { transform:translateX(18px); }
.params { display:flex; flex-direction:column; gap:6px; }
.params label { font-size:12px; color:var(--muted); display:flex; flex-direction:column; gap:2px; }
#messages { font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; max-height:180px; overflow:auto; margin:0; padding:0; list-style:none; }
#messages li { padding:3px 0; border-top:1px solid var(--line); overflow-wrap:anywhere; }
#messages li:first-child { border-top:none; }
#messages .name { color:var(--accent); }
.empty { color:var(--muted); font-size:12px; }
#clips .row { display:flex; gap:6px; align-items:center; flex-wrap:wrap; }
#clip-preview { width:100%; margin-top:6px; border-radius:6px; background:#000; }
#recordings { font-size:12px; margin:6px 0 0; padding:0; list-style:none; max-height:160px; overflow:auto; }
#recordings li { padding:3px 0; border-top:1px solid var(--line); overflow-wrap:anywhere; }
`;

/** The page's one inline script: the import map (its hash is allowed by the CSP), for the page's base path. */
const importMap = (basePath = ''): string =>
  JSON.stringify({ imports: { '@reactor/client': `${basePath}/viewer/client/index.js`, '@reactor/protocol': `${basePath}/viewer/protocol/index.js` } });

const sha256 = (text: string): string => `'sha256-${createHash('sha256').update(text).digest('base64')}'`;

/**
 * Security headers of the viewer page: a Content-Security-Policy that allows only this
 * server's scripts, styles and socket (the inline import map and style by hash), and
 * `frame-ancestors` limited to the server's own origin and `allowedOrigins` (`'none'` of
 * other pages' frames, against clickjacking); `Referrer-Policy: no-referrer`, since the page's
 * URL may carry `?token=`.
 */
export function viewerSecurityHeaders(allowedOrigins: readonly string[] | undefined, basePath = ''): Record<string, string> {
  const ancestors = allowedOrigins?.includes('*') ? '*' : ["'self'", ...(allowedOrigins ?? [])].join(' ');
  const csp = [
    "default-src 'none'",
    `script-src 'self' ${sha256(importMap(basePath))}`,
    `style-src 'self' ${sha256(CSS)}`,
    "img-src 'self' data: blob:",
    "connect-src 'self'",
    // The clip preview plays a clip's MP4 from this server.
    "media-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    `frame-ancestors ${ancestors}`,
  ].join('; ');
  return { 'Content-Security-Policy': csp, 'Referrer-Policy': 'no-referrer' };
}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

/** Renders the viewer page. */
export function renderViewerPage(o: ViewerPageOptions): string {
  const title = escapeHtml(o.title);
  const base = o.basePath ?? '';
  const config = JSON.stringify({ wsPath: `${base}${o.wsPath}`, basePath: base, recording: o.recording === true }).replace(/</g, '\\u003c');
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · Reactor</title>
<style>${CSS}</style>
<script type="importmap">${importMap(base)}</script>
<script id="reactor-config" type="application/json">${config}</script>
</head>
<body>
<header>
  <h1 id="app-name">${title}</h1><span class="version" id="app-version"></span>
  <span class="spacer"></span>
  <span class="badge" id="session" title="session status">session: -</span>
  <span class="badge" id="connection" title="connection">connecting</span>
</header>
<main>
  <div>
    <div class="stage"><canvas id="stream" width="512" height="512" aria-label="live stream"></canvas><div class="stage-card" id="stage-card" role="status" hidden></div></div>
    <div class="stats">
      <span>fps <b id="fps">0</b></span>
      <span>dropped <b id="dropped">0</b></span>
      <span>step <b id="step-ms">-</b> ms</span>
      <span>model fps <b id="model-fps">-</b></span>
      <span>frame <b id="seq">-</b></span>
      <span>size <b id="size">-</b></span>
      <span>codec <b id="codec">jpeg</b></span>
      <span>tier <b id="tier">-</b></span>
      <span>bitrate <b id="bitrate">-</b></span>
      <span>track <select id="track"></select></span>
    </div>
    <div class="stats" id="latency" title="measured in this page: from sending a command to drawing the first frame that shows it">
      <span>command-to-pixel p50 <b id="c2p-p50">-</b></span>
      <span>last <b id="c2p-last">-</b></span>
      <span>samples <b id="c2p-samples">0</b></span>
      <span>first frame <b id="first-frame">-</b></span>
      <span>freezes <b id="freezes">0</b></span>
    </div>
  </div>
  <aside>
    <section class="panel"><h2>Controls</h2><div id="controls"><p class="empty">Waiting for the schema...</p></div></section>
    <section class="panel" id="clips"><h2>Clips &amp; recordings</h2>
      <div class="row">
        <button id="clip-button" title="an MP4 of the last seconds of the stream">Clip</button>
        <select id="clip-seconds" aria-label="clip length"><option value="10">last 10 s</option><option value="30" selected>last 30 s</option><option value="60">last 60 s</option><option value="300">last 5 min</option></select>
        <button class="secondary" id="record-button">Start recording</button>
      </div>
      <div class="result" id="clip-out"></div>
      <ul id="recordings"><li class="empty">No recordings.</li></ul>
    </section>
    <section class="panel"><h2>Messages</h2><ul id="messages"><li class="empty">No messages yet.</li></ul></section>
  </aside>
</main>
<script type="module" src="${escapeHtml(base)}/viewer/app.js"></script>
</body>
</html>
`;
}
