#!/usr/bin/env node
// Probes for the impaired link (scripts/net/impaired-link.mjs), run inside its namespaces:
//
//   probe.mjs echo                 UDP echo + TCP sink on 0.0.0.0, ephemeral ports; prints
//                                  {"udp":port,"tcp":port}, then serves until stdin closes
//   probe.mjs rtt HOST PORT N      N UDP pings 10 ms apart; prints {"sent","received","rttMs":[..]}
//   probe.mjs tcp HOST PORT BYTES  sends BYTES over TCP, half-closes, waits for the sink's "ok";
//                                  prints {"bytes","ms"} (the sink answers once it read them all)
//
// Every mode prints exactly one JSON line on stdout (echo: before serving).
import { createSocket } from 'node:dgram';
import { createConnection, createServer } from 'node:net';

const [mode, host, port, count] = process.argv.slice(2);

if (mode === 'echo') {
  const udp = createSocket('udp4');
  udp.on('message', (msg, from) => udp.send(msg, from.port, from.address));
  const tcp = createServer((s) => {
    let n = 0;
    s.on('data', (d) => (n += d.length));
    s.on('end', () => s.end(`ok ${n}`));
    s.on('error', () => s.destroy());
  });
  await new Promise((r) => udp.bind(0, '0.0.0.0', r));
  await new Promise((r) => tcp.listen(0, '0.0.0.0', r));
  process.stdout.write(`${JSON.stringify({ udp: udp.address().port, tcp: tcp.address().port })}\n`);
  const stop = () => process.exit(0);
  process.on('SIGTERM', stop);
  process.stdin.on('end', stop);
  process.stdin.resume();
} else if (mode === 'rtt') {
  const n = Number(count);
  const sock = createSocket('udp4');
  const sentAt = new Map();
  const rttMs = [];
  sock.on('message', (msg) => {
    const i = msg.readUInt32BE(0);
    const t = sentAt.get(i);
    if (t !== undefined) {
      rttMs.push(performance.now() - t);
      sentAt.delete(i);
    }
  });
  for (let i = 0; i < n; i++) {
    const b = Buffer.alloc(64);
    b.writeUInt32BE(i, 0);
    sentAt.set(i, performance.now());
    sock.send(b, Number(port), host);
    await new Promise((r) => setTimeout(r, 10));
  }
  // Until every answer is in, or 1 s after the last ping (the rest were lost).
  for (let waited = 0; sentAt.size > 0 && waited < 1000; waited += 10) await new Promise((r) => setTimeout(r, 10));
  sock.close();
  process.stdout.write(`${JSON.stringify({ sent: n, received: rttMs.length, rttMs })}\n`);
} else if (mode === 'tcp') {
  const bytes = Number(count);
  const t0 = performance.now();
  const s = createConnection({ host, port: Number(port) });
  let answer = '';
  s.on('data', (d) => (answer += d));
  s.on('end', () => {
    process.stdout.write(`${JSON.stringify({ bytes, ms: performance.now() - t0, answer })}\n`);
    s.destroy();
  });
  s.on('error', (e) => {
    process.stderr.write(`${e.message}\n`);
    process.exit(1);
  });
  const chunk = Buffer.alloc(64 * 1024, 7);
  for (let left = bytes; left > 0; left -= chunk.length) {
    if (!s.write(left >= chunk.length ? chunk : chunk.subarray(0, left))) await new Promise((r) => s.once('drain', r));
  }
  s.end();
} else {
  process.stderr.write('usage: probe.mjs echo | rtt HOST PORT N | tcp HOST PORT BYTES\n');
  process.exit(2);
}
