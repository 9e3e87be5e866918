/**
 * The impaired-link harness (scripts/net/impaired-link.mjs) does what the network tests and
 * benchmarks rely on: the round trip, rate cap and loss asked for, measured with real packets
 * between its namespaces; UDP blocked while TCP passes; and nothing left behind (namespaces,
 * their links and rules, the processes in them), also after a run that was killed.
 * Needs root (`ip netns`); CI runs as root. Skipped, with the reason printed, only off Linux or
 * without root; a missing tool (iptables, tc, python3) fails it with the package to install.
 */
import { spawn, spawnSync } from 'node:child_process';
import { resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createImpairedLink, probeLink, type ImpairedLink } from '../scripts/net/impaired-link.mjs';

const harness = resolve(import.meta.dirname, '../scripts/net/impaired-link.mjs');
const unavailable = process.platform !== 'linux' || process.getuid?.() !== 0 ? 'needs root on Linux (ip netns); CI runs as root' : undefined;
if (unavailable) console.warn(`impaired-link test skipped: ${unavailable}`);

const namespaces = (): string[] =>
  spawnSync('ip', ['netns', 'list'], { encoding: 'utf8' })
    .stdout.split('\n')
    .map((l) => l.split(' ')[0]!)
    .filter(Boolean);

const links: ImpairedLink[] = [];
afterEach(async () => {
  for (const l of links.splice(0)) await l.close();
});

describe.skipIf(unavailable !== undefined)('impaired link: two namespaces, a router between them, delay through a userspace hop', () => {
  it('adds the round trip, caps the rate and drops the share asked for; blocks UDP and lets TCP through', async () => {
    const link = await createImpairedLink({ rttMs: 80, rateKbit: 4000, loss: 0.02 });
    links.push(link);
    const p = await probeLink(link, { pings: 200, tcpBytes: 1_000_000 });
    // 80 ms through the hop (plus scheduling): never less, not much more.
    expect(p.rttMinMs).toBeGreaterThanOrEqual(79);
    expect(p.rttP50Ms).toBeLessThan(110);
    // 2 % each way: ~4 % of round trips lost, ~8 of 200 (0 lost has odds of 3 in 10,000).
    const lost = p.pingsSent - p.pingsReceived;
    expect(lost).toBeGreaterThanOrEqual(1);
    expect(lost).toBeLessThanOrEqual(30);
    // TCP through 4 Mbit/s with loss: under the cap, not stalled.
    expect(p.tcpKbit).toBeLessThan(4400);
    expect(p.tcpKbit).toBeGreaterThan(800);

    link.blockUdp(true);
    const blocked = await probeLink(link, { pings: 10, tcpBytes: 100_000 });
    expect(blocked.pingsReceived).toBe(0);
    expect(blocked.tcpKbit).toBeGreaterThan(0);
    link.blockUdp(false);
    link.setLoss(0);
    const clear = await probeLink(link, { pings: 20 });
    expect(clear.pingsReceived).toBe(20);
  }, 60_000);

  it('close() kills what ran inside and removes the namespaces; the hop counted the traffic', async () => {
    const link = await createImpairedLink({ rttMs: 20 });
    const mine = [link.server.ns, link.viewer.ns, link.router.ns];
    expect(namespaces()).toEqual(expect.arrayContaining(mine));
    const sleeper = link.spawn('viewer', 'sleep', ['60'], { stdio: 'ignore' });
    const gone = new Promise((r) => sleeper.once('exit', r));
    await probeLink(link, { pings: 5 });
    const hop = await link.close();
    expect(hop?.forwarded).toBeGreaterThanOrEqual(10);
    await gone;
    expect(namespaces().filter((n) => mine.includes(n))).toEqual([]);
  }, 30_000);

  it("removes a killed run's namespaces on the next start", async () => {
    // A process that makes a link and is killed before it can close it.
    const child = spawn(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const m = await import(${JSON.stringify(harness)}); const l = await m.createImpairedLink(); console.log(l.server.ns); setInterval(() => {}, 1000);`,
      ],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    const ns = await new Promise<string>((res) => child.stdout.once('data', (d: Buffer) => res(d.toString().trim())));
    const prefix = ns.replace(/-s$/, '');
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    expect(namespaces().filter((n) => n.startsWith(prefix))).toHaveLength(3);
    const next = await createImpairedLink();
    links.push(next);
    expect(namespaces().filter((n) => n.startsWith(prefix))).toEqual([]);
  }, 30_000);
});
