#!/usr/bin/env node
// Access benchmarks (issue 25): what signed session tokens, resume and the router's waiting line cost.
//
//   access.token_check   the server's check of one request (`authorize()`: Host, token, Origin) with
//                        an HS256 token, an EdDSA token and the static token, in process, ms p50/p99
//                        (target p50 <= 0.1 ms); the same code runs for the upgrade and every HTTP
//                        route. "Repeat": the same token again (5000 checks; the verified-token cache
//                        skips the signature); "First": a token never seen before (1800 checks). Also GET /schema end to end on loopback with a JWT and with
//                        the static token, p50 (the difference is the check as a request sees it).
//   access.resume        `reactor run` of the camera sample, a client that publishes a camera through
//                        a TCP proxy in this process; the proxy cuts the connection (no close frame):
//                        cut -> `resumed` and cut -> first frame again, ms p50/max of 10 (target p50
//                        <= 1000 ms), with the SDK's default back-off (first retry after 250 ms +- 25 %)
//   access.queue         the router and the mock Kubernetes API of the tests: one request waits in
//                        the line; its instance goes back to Ready -> the waiting client reads its
//                        `allocated` line, ms p50/p99 of 30 (target <= 200 ms)
//
// Run after `pnpm build`: node bench/access.bench.mjs
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect as netConnect, createServer as netServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { generateKeyPairSync } from 'node:crypto';
import ts from '../node_modules/typescript/lib/typescript.js';
import { TokenMinter, TokenVerifier, authorize } from '../packages/access/dist/index.js';
import { route, loadKubeConfig } from '../packages/router/dist/index.js';
import { connect } from '../packages/client/dist/index.js';
import { WebSocket } from '../packages/server/node_modules/ws/wrapper.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const repo = join(here, '..');
const cli = join(repo, 'packages/cli/dist/main.js');
const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };
const r3 = (x) => Math.round(x * 1000) / 1000;
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const SECRET = 'a-bench-secret-of-at-least-32-characters-000';
const STATIC = 'static-token-0123456789';

// ---- the token check ----------------------------------------------------------------------
{
  const ed = generateKeyPairSync('ed25519');
  const verifier = new TokenVerifier({ secret: SECRET, publicKey: ed.publicKey.export({ type: 'spki', format: 'pem' }).toString() });
  const hs = await new TokenMinter({ secret: SECRET }).mint({ role: 'spectator' });
  const eddsa = await new TokenMinter({ privateKey: ed.privateKey }).mint({ role: 'spectator' });
  const policy = { token: STATIC, allowedHosts: ['127.0.0.1'], allowedOrigins: undefined, verifier };
  const url = new URL('http://127.0.0.1/ws');
  const req = (token) => ({ headers: { host: '127.0.0.1:8080', authorization: `Bearer ${token}` } });
  const sessions = () => [];
  const time = async (token) => {
    const r = req(token);
    for (let i = 0; i < 500; i++) await authorize(r, url, policy, sessions); // warm-up
    const xs = [];
    for (let i = 0; i < 5000; i++) {
      const t = performance.now();
      const a = await authorize(r, url, policy, sessions);
      xs.push(performance.now() - t);
      if (!a.ok) throw new Error(`refused: ${a.denial.code}`);
    }
    return xs;
  };
  const h = await time(hs);
  const e = await time(eddsa);
  const s = await time(STATIC);
  // Cold: every check a token never seen (the signature is verified each time).
  const cold = async (minter) => {
    const tokens = [];
    for (let i = 0; i < 2000; i++) tokens.push(await minter.mint({ role: 'spectator' }));
    const xs = [];
    for (const t0 of tokens) {
      const r = req(t0);
      const t = performance.now();
      const a = await authorize(r, url, policy, sessions);
      xs.push(performance.now() - t);
      if (!a.ok) throw new Error(`refused: ${a.denial.code}`);
    }
    return xs.slice(200);
  };
  const hCold = await cold(new TokenMinter({ secret: SECRET }));
  const eCold = await cold(new TokenMinter({ privateKey: ed.privateKey }));

  // End to end: GET /schema of a served app (the camera sample) with a JWT and with the static token.
  const dir = mkdtempSync(join(tmpdir(), 'access-bench-'));
  writeFileSync(join(dir, 'config.yaml'), 'worldSize: 1\ncallTimeoutMs: 10000\n');
  writeFileSync(
    join(dir, 'reactor.yaml'),
    `runtime:\n  import: ${join(repo, 'apps/camera/dist/index.js')}:CameraApp\n  config: config.yaml\nserver:\n  port: 0\n  token: ${STATIC}\n`,
  );
  const server = await startCli(dir, { REACTOR_AUTH_SECRET: SECRET });
  const get = async (token) => {
    const xs = [];
    for (let i = 0; i < 300; i++) {
      const t = performance.now();
      const res = await fetch(`${server.base}/schema`, { headers: { authorization: `Bearer ${token}` } });
      await res.arrayBuffer();
      if (i >= 50) xs.push(performance.now() - t);
      if (res.status !== 200) throw new Error(`GET /schema answered ${res.status}`);
    }
    return xs;
  };
  const httpJwt = await get(hs);
  const httpStatic = await get(STATIC);
  console.log(
    JSON.stringify({
      bench: 'access.token_check',
      checks: h.length,
      hs256RepeatP50Ms: r3(pct(h, 50)),
      hs256RepeatP99Ms: r3(pct(h, 99)),
      eddsaRepeatP50Ms: r3(pct(e, 50)),
      eddsaRepeatP99Ms: r3(pct(e, 99)),
      hs256FirstP50Ms: r3(pct(hCold, 50)),
      hs256FirstP99Ms: r3(pct(hCold, 99)),
      eddsaFirstP50Ms: r3(pct(eCold, 50)),
      eddsaFirstP99Ms: r3(pct(eCold, 99)),
      staticP50Ms: r3(pct(s, 50)),
      targetP50Ms: 0.1,
      httpGetJwtP50Ms: r3(pct(httpJwt, 50)),
      httpGetStaticP50Ms: r3(pct(httpStatic, 50)),
    }),
  );

  // ---- resume: drop -> first frame again ---------------------------------------------------
  const pairs = new Set();
  const proxy = netServer((down) => {
    const up = netConnect(server.port, '127.0.0.1');
    const pair = [down, up];
    pairs.add(pair);
    down.pipe(up);
    up.pipe(down);
    const drop = () => (down.destroy(), up.destroy(), pairs.delete(pair));
    down.on('error', drop).on('close', drop);
    up.on('error', drop).on('close', drop);
  });
  await new Promise((r) => proxy.listen(0, '127.0.0.1', r));
  const token = await new TokenMinter({ secret: SECRET }).mint({});
  const client = await connect(`http://127.0.0.1:${proxy.address().port}`, { token, WebSocket });
  const stop = new AbortController();
  const cam = async function* () {
    let n = 0;
    while (!stop.signal.aborted) {
      yield { rgb: new Uint8Array(64 * 48 * 3).fill(n++ % 250), width: 64, height: 48 };
      await new Promise((r) => setTimeout(r, 33));
    }
  };
  const pub = await client.publish('webcam', cam());
  let lastFrameAt = 0;
  client.on('frame', () => (lastFrameAt = performance.now()));
  const toResumed = [];
  const toFrame = [];
  let newIdentities = 0;
  client.on('new_identity', () => newIdentities++);
  for (let i = 0; i < 10; i++) {
    await new Promise((r) => setTimeout(r, 500));
    const resumed = new Promise((r) => client.once('resumed', r));
    const t = performance.now();
    for (const [a, b] of pairs) (a.destroy(), b.destroy());
    await resumed;
    toResumed.push(performance.now() - t);
    const after = performance.now();
    while (lastFrameAt < after) await new Promise((r) => setTimeout(r, 2));
    toFrame.push(lastFrameAt - t);
  }
  console.log(
    JSON.stringify({
      bench: 'access.resume',
      drops: toFrame.length,
      toResumedP50Ms: Math.round(pct(toResumed, 50)),
      toFrameP50Ms: Math.round(pct(toFrame, 50)),
      toFrameMaxMs: Math.round(Math.max(...toFrame)),
      targetP50Ms: 1000,
      publicationHeld: pub.active,
      newIdentities,
    }),
  );
  stop.abort();
  client.close();
  proxy.close();
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
}

// ---- the router's line: Ready -> allocation of the first waiting client ----------------------
{
  const tmp = mkdtempSync(join(tmpdir(), 'access-bench-router-'));
  mkdirSync(join(tmp, 'agones'));
  writeFileSync(join(tmp, 'package.json'), '{"type":"module"}');
  for (const f of ['cluster', 'kube-api']) {
    const src = readFileSync(join(repo, 'test/fixtures/agones', `${f}.ts`), 'utf8');
    const out = ts.transpileModule(src, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, verbatimModuleSyntax: true } });
    writeFileSync(join(tmp, 'agones', `${f}.js`), out.outputText);
  }
  const { FakeAgonesCluster } = await import(pathToFileURL(join(tmp, 'agones/cluster.js')).href);
  const { MockKubeApi } = await import(pathToFileURL(join(tmp, 'agones/kube-api.js')).href);
  const cluster = new FakeAgonesCluster();
  cluster.addServer('reactor-0', '10.0.0.1', 7000);
  cluster.setState('reactor-0', 'Ready');
  const api = await new MockKubeApi(cluster).start();
  const { kubeConfig, namespace } = loadKubeConfig({ file: api.writeKubeconfig(), env: {} });
  // The default poll (1 s) stays: the watch's Ready event is what this measures.
  // Nothing listens at the instances' addresses: no readiness check before handing one out (it costs one round trip to the pod in a cluster).
  const router = await route({ kubeConfig, namespace, fleet: cluster.fleet, port: 0, logger: quiet, allocationCheckTimeoutMs: 0 });
  await fetch(`${router.url}/sessions`, { method: 'POST' }).then((r) => r.arrayBuffer());
  const xs = [];
  for (let i = 0; i < 30; i++) {
    const res = await fetch(`${router.url}/sessions?wait=30`, { method: 'POST' });
    if (res.status !== 202) throw new Error(`expected 202, got ${res.status}`);
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = dec.decode((await reader.read()).value);
    if (!buf.includes('"queued"')) throw new Error(`expected a queued line, got ${buf}`);
    await new Promise((r) => setTimeout(r, 20));
    const t = performance.now();
    cluster.setState('reactor-0', 'Ready');
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value);
      if (buf.includes('"allocated"')) break;
    }
    xs.push(performance.now() - t);
    if (!buf.includes('"allocated"')) throw new Error(`no allocation: ${buf}`);
    await reader.cancel().catch(() => undefined);
  }
  console.log(JSON.stringify({ bench: 'access.queue', waits: xs.length, readyToAllocatedP50Ms: r3(pct(xs, 50)), p99Ms: r3(pct(xs, 99)), targetP50Ms: 200 }));
  await router.close();
  await api.close();
  rmSync(tmp, { recursive: true, force: true });
}

/** `reactor run --manifest <dir>/reactor.yaml` as a child; resolves once it printed its URL. */
function startCli(dir, env) {
  const child = spawn(process.execPath, [cli, 'run', '--manifest', join(dir, 'reactor.yaml')], {
    cwd: dir,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = /Viewer: (\S+)/.exec(out);
      if (m) {
        const u = new URL(m[1]);
        resolve({
          base: u.origin,
          port: Number(u.port),
          stop: () =>
            new Promise((r) => {
              child.once('exit', r);
              child.kill('SIGTERM');
            }),
        });
      }
    });
    child.once('exit', (code) => reject(new Error(`reactor run exited with ${code}: ${err}`)));
  });
}
