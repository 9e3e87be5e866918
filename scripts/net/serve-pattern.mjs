#!/usr/bin/env node
// serve() of scripts/net/pattern-app.mjs with the options in REACTOR_NET_SERVE (JSON: host, token,
// video, webrtc, ...; port 0), for the network benchmark: prints "Viewer: <url>?token=..." as
// `reactor run` does, closes on SIGTERM.
import { serve } from '../../packages/server/dist/index.js';
import { PatternApp } from './pattern-app.mjs';

const options = JSON.parse(process.env.REACTOR_NET_SERVE ?? '{}');
const verbose = process.env.NET_BENCH_SERVER_LOG === '1';
const quiet = {
  debug() {},
  info: (...a) => verbose && console.error(...a),
  warn: (...a) => console.error(...a),
  error: (...a) => console.error(...a),
  child: () => quiet,
};
const server = await serve(PatternApp, { port: 0, gracePeriodMs: 0, logger: quiet, ...options });
await server.loaded;
const url = new URL(server.url);
if (options.token) url.searchParams.set('token', options.token);
console.log(`Viewer: ${url.href}`);
process.on('SIGTERM', () => void server.close().then(() => process.exit(0)));
