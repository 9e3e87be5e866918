import { describe, expect, it } from 'vitest';
import type { Socket } from 'node:net';
import { type AppHost } from '@reactor/runtime';
import { serve, type ReactorServer } from '../src/index.js';
import { patternApp } from './fixtures/pattern-app.js';
import { until } from '@reactor/test-kit';
import { RawClient, stalledClient } from './fixtures/net.js';
import { quiet, useCleanups } from './fixtures/cleanups.js';

const cleanups = useCleanups();

/** One client-to-server text message "x", masked with a zero key (what a client must send). */
const ONE = Buffer.from([0x81, 0x80 | 1, 0, 0, 0, 0, 0x78]);
/**
 * 60 000 of them: each earns an error answer of ~250 bytes (rate_limited or malformed_message),
 * ~15 MB in all, far more than the loopback kernel buffers of both ends hold.
 */
const FLOOD_MESSAGES = 60_000;
const flood = (): Buffer => Buffer.concat(Array.from({ length: FLOOD_MESSAGES }, () => ONE));

/** Messages the server handled (answered), from its own counter. */
async function handled(server: ReactorServer): Promise<number> {
  const m = await server.metrics.commands.get();
  return m.values.reduce((n, v) => n + v.value, 0);
}

async function start(opts: Parameters<typeof serve>[1] = {}): Promise<ReactorServer> {
  const server = await serve(patternApp({ width: 32, height: 32, fps: 30 }), { port: 0, gracePeriodMs: 0, logger: quiet, ...opts });
  cleanups.push(() => server.close());
  await server.loaded;
  return server;
}

describe('server: a client that writes and does not read its answers', () => {
  it('is paused (its messages wait in its own buffers, not answered without bound) and resumed once it reads', async () => {
    const readPauseBytes = 64 * 1024;
    const server = await start({ readPauseBytes, readPauseTimeoutMs: 600_000 });
    const viewer = await new RawClient(server.wsUrl).open();
    cleanups.push(() => viewer.close());
    const abuser: Socket = await stalledClient(server.port);
    cleanups.push(() => abuser.destroy());
    await until(() => server.connections().length === 2, 'the abuser to join', 5000);
    const handled0 = await handled(server);
    abuser.write(flood());

    await until(() => server.connections().some((c) => c.readPaused), 'the server to stop reading the abuser', 20_000);
    const paused = server.connections().find((c) => c.readPaused)!;
    const handledAtPause = await handled(server);
    // Paused well before the flood was answered: the rest waits on the abuser's side.
    expect(handledAtPause - handled0).toBeLessThan(FLOOD_MESSAGES);

    // While the viewer receives 20 more frames, the paused abuser gets no further answers, and
    // what the server holds for it stays within the bound (plus one answer).
    const frames0 = viewer.binaries.length;
    await until(() => viewer.binaries.length >= frames0 + 20, '20 more frames for the viewer', 20_000);
    const still = server.connections().find((c) => c.id === paused.id)!;
    expect(still.readPaused).toBe(true);
    expect(still.unsentAnswerBytes).toBeLessThanOrEqual(readPauseBytes + 4096);
    // At most what `ws` had already read when the socket paused was handled since.
    expect((await handled(server)) - handledAtPause).toBeLessThan(FLOOD_MESSAGES / 2);
    expect(await server.metrics.readPauses.get().then((m) => m.values[0]?.value)).toBeGreaterThanOrEqual(1);

    // The abuser reads: the server resumes and answers every message it sent, in the end.
    let received = 0;
    abuser.on('data', (d: Buffer) => (received += d.byteLength));
    abuser.resume();
    await until(async () => (await handled(server)) - handled0 >= FLOOD_MESSAGES, 'every flood message to be answered', 60_000);
    const after = server.connections().find((c) => c.id === paused.id)!;
    expect(after.readPauses).toBeGreaterThanOrEqual(1);
    await until(() => !server.connections().find((c) => c.id === paused.id)!.readPaused, 'the abuser to be read again', 20_000);
    expect(received).toBeGreaterThan(readPauseBytes);
    // Never cut: it read in the end.
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metrics).not.toMatch(/reactor_connections_rejected_total\{reason="unread_answers"\} [1-9]/);
    expect(server.connections()).toHaveLength(2);
  }, 120_000);

  it('is cut (unread_answers; close code 1008 queued behind its unread answers) when it stays unread past readPauseTimeoutMs', async () => {
    const server = await start({ readPauseTimeoutMs: 300 });
    const viewer = await new RawClient(server.wsUrl).open();
    cleanups.push(() => viewer.close());
    const abuser = await stalledClient(server.port);
    cleanups.push(() => abuser.destroy());
    await until(() => server.connections().length === 2, 'the abuser to join', 5000);
    abuser.on('error', () => undefined);
    abuser.write(flood());
    await until(() => server.connections().length === 1, 'the abuser to be cut', 30_000);
    // Its socket is really closed: once it reads again it sees the end (a paused socket notices nothing).
    const gone = new Promise<void>((resolve) => abuser.once('close', () => resolve()));
    abuser.on('data', () => undefined);
    abuser.resume();
    await gone;
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metrics).toMatch(/reactor_connections_rejected_total\{reason="unread_answers"\} 1/);
    expect(metrics).toMatch(/reactor_read_pauses_total [1-9]/);
    // The viewer was left alone and still gets frames and answers.
    const frames0 = viewer.binaries.length;
    await until(() => viewer.binaries.length > frames0 + 3, 'more frames for the viewer', 10_000);
    expect(await viewer.command('ok', 'set_speed', { speed: 1 })).toEqual({ type: 'reply', id: 'ok' });
  }, 60_000);

  it("does not change other viewers' frame rate while 5 such clients flood the server", async () => {
    const server = await start();
    const viewers = [await new RawClient(server.wsUrl).open(), await new RawClient(server.wsUrl).open()];
    cleanups.push(() => viewers.forEach((v) => v.close()));
    await until(() => viewers.every((v) => v.binaries.length > 10), 'the stream to run', 10_000);
    const played = (): number => (server.host as AppHost).counters.framesPlayed;
    const rate = async (frames: number): Promise<number[]> => {
      const got0 = viewers.map((v) => v.binaries.length);
      const t0 = performance.now();
      const p0 = played();
      await until(() => played() - p0 >= frames, `${frames} frames`, 30_000);
      const s = (performance.now() - t0) / 1000;
      return viewers.map((v, i) => (v.binaries.length - got0[i]!) / s);
    };
    const baseline = await rate(45);
    const abusers = await Promise.all([0, 1, 2, 3, 4].map(() => stalledClient(server.port)));
    cleanups.push(() => abusers.forEach((a) => a.destroy()));
    await until(() => server.connections().length === 7, 'the abusers to join', 10_000);
    const payload = flood();
    // Measured from the first abusive byte: the flood's start is when the server works hardest.
    const measuring = rate(45);
    for (const a of abusers) a.write(payload);
    const during = await measuring;
    await until(() => server.connections().filter((c) => c.readPaused).length === 5, 'every abuser to be paused', 30_000);
    for (const [i, fps] of during.entries()) expect(fps).toBeGreaterThan(baseline[i]! * 0.8);
  }, 120_000);
});
