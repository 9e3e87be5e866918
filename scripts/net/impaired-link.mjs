// An impaired network between a "server" and a "viewer" (root only; tests and benchmarks).
//
// Three network namespaces: the server's and the viewer's, each joined by a veth pair to a
// router namespace between them. This kernel has no netem, so the router impairs the path itself:
//   - delay: every forwarded packet goes through a userspace hop (scripts/net/delay-hop.py, two
//     TUN devices; policy routing sends what comes in from either side out through the hop), half
//     the round trip each way;
//   - rate: `tc qdisc tbf` on the router's egress towards each side;
//   - loss: `iptables -m statistic --mode random --probability p -j DROP` in the router's FORWARD
//     chain, each direction (only as a packet enters from a side: it crosses FORWARD twice);
//   - `blockUdp(true)`: `iptables -p udp -j DROP` there (a firewall that lets only TCP through).
//
//   server ns  [s0 10.203.1.2] -- veth -- [rs 10.203.1.1]  router ns  [rv 10.203.2.1] -- veth -- [v0 10.203.2.2]  viewer ns
//                                          rs -> tun A ~~ delay-hop.py ~~ tun B -> rv  (and back)
//
// Names carry this process's pid (`rxnet-<pid>-<n>-{s,v,r}`): `close()` kills every process still
// in the namespaces and deletes them (veths, routes, qdiscs and iptables rules go with them); an
// exit handler closes what a test left open; a namespace left by a run whose process is gone is
// removed by the next `createImpairedLink()`. Addresses are the same in every link (each link has
// its own namespaces), and nothing touches the root namespace.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const PREFIX = 'rxnet-';
const SERVER_IP = '10.203.1.2';
const VIEWER_IP = '10.203.2.2';
const open = new Set();
let counter = 0;

/** Why an impaired link cannot be made here, or undefined when it can. */
export function impairedLinkUnavailable() {
  if (process.platform !== 'linux') return `network namespaces need Linux (this is ${process.platform})`;
  if (process.getuid?.() !== 0) return 'network namespaces need root (ip netns add); CI runs as root';
  for (const [cmd, args, pkg] of [
    ['ip', ['netns', 'list'], 'iproute2'],
    ['tc', ['-V'], 'iproute2'],
    ['iptables', ['--version'], 'iptables'],
    ['python3', ['--version'], 'python3'],
  ]) {
    const r = spawnSync(cmd, args, { encoding: 'utf8' });
    if (r.error || r.status !== 0) return `${cmd} is unavailable: ${r.error?.message ?? r.stderr.trim()} (Debian: apt-get install ${pkg})`;
  }
  return undefined;
}

function run(cmd, ...args) {
  return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Kills every process inside `ns` (they are ours: the namespace is) and deletes it. */
function removeNamespace(ns) {
  for (let i = 0; i < 3; i++) {
    const pids = spawnSync('ip', ['netns', 'pids', ns], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean).map(Number);
    if (pids.length === 0) break;
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    spawnSync('sleep', ['0.05']);
  }
  spawnSync('ip', ['netns', 'del', ns]);
}

function removeStale() {
  for (const line of run('ip', 'netns', 'list').split('\n')) {
    const ns = line.split(' ')[0] ?? '';
    const m = new RegExp(`^${PREFIX}(\\d+)-`).exec(ns);
    if (m && !alive(Number(m[1]))) removeNamespace(ns);
  }
}

process.on('exit', () => {
  for (const link of [...open]) link.closeSync();
});

/**
 * Makes the link. `rttMs`: round trip added by the hop (split evenly); `rateKbit`: the cap each
 * way (none: uncapped); `loss`: drop probability each way, 0..1; `queueMs`: the bottleneck's
 * buffer (tbf latency), default 80 ms.
 */
export async function createImpairedLink({ rttMs = 0, rateKbit, loss = 0, queueMs = 80 } = {}) {
  removeStale();
  const id = `${process.pid}-${counter++}`;
  const ns = { server: `${PREFIX}${id}-s`, viewer: `${PREFIX}${id}-v`, router: `${PREFIX}${id}-r` };
  // Interface names: at most 15 characters; unique per link only for readability (each lives in its own namespace).
  const tag = `rn${process.pid.toString(36)}${(counter - 1).toString(36)}`;
  const ifs = { s0: `${tag}s0`, v0: `${tag}v0`, rs: `${tag}rs`, rv: `${tag}rv`, ta: `${tag}ta`, tb: `${tag}tb` };
  const made = [];
  const children = new Set();
  let hop;
  const inNs = (n, ...args) => run('ip', 'netns', 'exec', n, ...args);
  const link = {
    server: { ns: ns.server, ip: SERVER_IP },
    viewer: { ns: ns.viewer, ip: VIEWER_IP },
    router: { ns: ns.router },
    closed: false,
    closeSync() {
      if (link.closed) return;
      link.closed = true;
      open.delete(link);
      for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
      for (const n of made.splice(0).reverse()) removeNamespace(n);
    },
  };
  open.add(link);
  try {
    for (const n of [ns.router, ns.server, ns.viewer]) {
      run('ip', 'netns', 'add', n);
      made.push(n);
      inNs(n, 'ip', 'link', 'set', 'lo', 'up');
      // No IPv6 chatter (router solicitations, DAD) on the measured link.
      inNs(n, 'sysctl', '-qw', 'net.ipv6.conf.all.disable_ipv6=1', 'net.ipv6.conf.default.disable_ipv6=1');
    }
    run('ip', 'link', 'add', ifs.s0, 'netns', ns.server, 'type', 'veth', 'peer', 'name', ifs.rs, 'netns', ns.router);
    run('ip', 'link', 'add', ifs.v0, 'netns', ns.viewer, 'type', 'veth', 'peer', 'name', ifs.rv, 'netns', ns.router);
    for (const [n, dev, addr, gw] of [
      [ns.server, ifs.s0, `${SERVER_IP}/24`, '10.203.1.1'],
      [ns.viewer, ifs.v0, `${VIEWER_IP}/24`, '10.203.2.1'],
    ]) {
      inNs(n, 'ip', 'addr', 'add', addr, 'dev', dev);
      inNs(n, 'ip', 'link', 'set', dev, 'up');
      inNs(n, 'ip', 'route', 'add', 'default', 'via', gw);
    }
    const r = (...args) => inNs(ns.router, ...args);
    r('sysctl', '-qw', 'net.ipv4.ip_forward=1', 'net.ipv4.conf.all.rp_filter=0', 'net.ipv4.conf.default.rp_filter=0');
    r('ip', 'addr', 'add', '10.203.1.1/24', 'dev', ifs.rs);
    r('ip', 'addr', 'add', '10.203.2.1/24', 'dev', ifs.rv);
    r('ip', 'link', 'set', ifs.rs, 'up');
    r('ip', 'link', 'set', ifs.rv, 'up');
    if (rttMs > 0) {
      hop = spawn('ip', ['netns', 'exec', ns.router, 'python3', join(here, 'delay-hop.py'), ifs.ta, ifs.tb, String(rttMs / 2)], {
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      children.add(hop);
      let err = '';
      hop.stderr.on('data', (d) => (err += d));
      await new Promise((res, rej) => {
        let out = '';
        hop.stdout.on('data', (d) => {
          out += d;
          if (out.includes('ready\n')) res();
        });
        hop.once('exit', (code) => rej(new Error(`delay-hop.py exited with ${code} before it was ready: ${err.trim()}`)));
      });
      for (const dev of [ifs.ta, ifs.tb]) {
        r('sysctl', '-qw', `net.ipv4.conf.${dev}.rp_filter=0`);
        r('ip', 'link', 'set', dev, 'txqueuelen', '1000', 'up');
      }
      // In from the server: out through tun A (the hop writes it into tun B: back in, then the
      // main table sends it to the viewer); in from the viewer: out through tun B.
      r('ip', 'route', 'add', 'default', 'dev', ifs.ta, 'table', '100');
      r('ip', 'route', 'add', 'default', 'dev', ifs.tb, 'table', '101');
      r('ip', 'rule', 'add', 'iif', ifs.rs, 'table', '100', 'priority', '100');
      r('ip', 'rule', 'add', 'iif', ifs.rv, 'table', '101', 'priority', '101');
    }
    if (rateKbit !== undefined) {
      // burst: ~10 full packets (at least rate/HZ); the queue holds queueMs of traffic.
      const burst = Math.max(15_000, Math.ceil((rateKbit * 1000) / 8 / 250));
      for (const dev of [ifs.rs, ifs.rv]) {
        r('tc', 'qdisc', 'add', 'dev', dev, 'root', 'tbf', 'rate', `${rateKbit}kbit`, 'burst', String(burst), 'latency', `${queueMs}ms`);
      }
    }
    link.setLoss = (p) => {
      for (const dev of [ifs.rs, ifs.rv]) {
        spawnSync('ip', [
          'netns',
          'exec',
          ns.router,
          'iptables',
          '-D',
          'FORWARD',
          '-i',
          dev,
          '-m',
          'statistic',
          '--mode',
          'random',
          '--probability',
          String(link.loss),
          '-j',
          'DROP',
        ]);
        if (p > 0) r('iptables', '-A', 'FORWARD', '-i', dev, '-m', 'statistic', '--mode', 'random', '--probability', String(p), '-j', 'DROP');
      }
      link.loss = p;
    };
    link.loss = 0;
    link.setLoss(loss);
    link.udpBlocked = false;
    link.blockUdp = (on) => {
      if (on === link.udpBlocked) return;
      r('iptables', on ? '-I' : '-D', 'FORWARD', '-p', 'udp', '-j', 'DROP');
      link.udpBlocked = on;
    };
  } catch (err) {
    link.closeSync();
    throw err;
  }
  /** Spawns `command` inside side's namespace (`ip netns exec` execs it: the child's pid is the command's). */
  link.spawn = (side, command, args, options = {}) => {
    const c = spawn('ip', ['netns', 'exec', ns[side], command, ...args], options);
    children.add(c);
    c.once('exit', () => children.delete(c));
    return c;
  };
  /** Runs `command` inside side's namespace; returns its stdout (throws on a non-zero exit). */
  link.exec = (side, command, ...args) => inNs(ns[side], command, ...args);
  /** What the delay hop forwarded and dropped (the hop prints it as it exits); undefined without delay. */
  link.close = async () => {
    let hopStats;
    if (hop && hop.exitCode === null) {
      const out = [];
      hop.stdout.on('data', (d) => out.push(String(d)));
      const exited = new Promise((res) => hop.once('exit', res));
      hop.stdin.end();
      await Promise.race([exited, new Promise((res) => setTimeout(res, 2000))]);
      const last = out.join('').trim().split('\n').pop();
      try {
        hopStats = last ? JSON.parse(last) : undefined;
      } catch {
        hopStats = undefined;
      }
    }
    link.closeSync();
    return hopStats;
  };
  return link;
}

/** The probes of scripts/net/probe.mjs across a link: round trips (UDP) and TCP throughput, viewer -> server. */
export async function probeLink(link, { pings = 50, tcpBytes = 0 } = {}) {
  const echo = link.spawn('server', process.execPath, [join(here, 'probe.mjs'), 'echo'], { stdio: ['pipe', 'pipe', 'inherit'] });
  try {
    const ports = await new Promise((res, rej) => {
      let out = '';
      echo.stdout.on('data', (d) => {
        out += d;
        if (out.includes('\n')) res(JSON.parse(out));
      });
      echo.once('exit', (code) => rej(new Error(`probe echo exited with ${code}`)));
    });
    const probe = async (...args) => {
      const c = link.spawn('viewer', process.execPath, [join(here, 'probe.mjs'), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      c.stdout.on('data', (d) => (out += d));
      c.stderr.on('data', (d) => (err += d));
      const code = await new Promise((res) => c.once('exit', res));
      if (code !== 0) throw new Error(`probe ${args[0]} exited with ${code}: ${err.trim()}`);
      return JSON.parse(out);
    };
    const rtt = await probe('rtt', link.server.ip, String(ports.udp), String(pings));
    const sorted = [...rtt.rttMs].sort((a, b) => a - b);
    const result = {
      pingsSent: rtt.sent,
      pingsReceived: rtt.received,
      rttP50Ms: sorted.length ? sorted[Math.floor(sorted.length / 2)] : NaN,
      rttMinMs: sorted[0] ?? NaN,
    };
    if (tcpBytes > 0) {
      const t = await probe('tcp', link.server.ip, String(ports.tcp), String(tcpBytes));
      if (t.answer !== `ok ${tcpBytes}`) throw new Error(`TCP sink answered ${JSON.stringify(t.answer)}, not "ok ${tcpBytes}"`);
      result.tcpKbit = (tcpBytes * 8) / t.ms;
    }
    return result;
  } finally {
    echo.stdin.end();
    echo.kill('SIGTERM');
  }
}
