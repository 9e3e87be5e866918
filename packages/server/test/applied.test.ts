/**
 * Applied-at acknowledgements through the real server and `@reactor/client` (issue 26): an app
 * that paints what it read into its frames (raw RGB on the wire), so the frame an `applied`
 * message names can be checked against the picture: it is the first frame that shows the
 * command's value, never an earlier or a later one. Then each outcome that names no frame.
 */
import { describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import {
  CommandFailedError,
  WebRtcLink,
  connect,
  type AppliedInfo,
  type AppliedMessage,
  type ReactorClient,
  type RtcPeerConnectionConstructor,
} from '@reactor/client';
import { RTCPeerConnection } from 'werift';
import { AppHost } from '@reactor/runtime';
import { HostSwitch, serve, serveHost, type ReactorServer } from '../src/index.js';
import { quiet, useCleanups } from './fixtures/cleanups.js';
import { until } from '@reactor/test-kit';
import { painterApp, readPainted } from './fixtures/painter-app.js';

const cleanups = useCleanups();

async function start(app: Parameters<typeof painterApp>[0] = {}): Promise<ReactorServer> {
  const server = await serve(painterApp(app), { port: 0, gracePeriodMs: 0, logger: quiet, encoding: 'rgb' });
  cleanups.push(() => server.close());
  await server.loaded;
  return server;
}

/** A connected client that keeps what every frame showed, by seq, and every `applied` message. */
async function watcher(server: ReactorServer): Promise<{
  client: ReactorClient;
  shown: Map<number, { value: number; painted: number }>;
  applied: AppliedMessage[];
}> {
  const client = await connect(server.url, { WebSocket, reconnect: false });
  cleanups.push(() => client.close());
  const shown = new Map<number, { value: number; painted: number }>();
  const applied: AppliedMessage[] = [];
  client.on('frame', (f) => shown.set(f.seq, readPainted(f.payload)));
  client.on('applied', (m) => applied.push(m));
  await until(() => shown.size > 0, 'the first frame', 10_000);
  return { client, shown, applied };
}

/** Deterministic random numbers (a failure replays). */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 2 ** 32;
  };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('applied-at: the frame named is the first that shows the command', () => {
  it('for 100 random setter and event commands at random times, never earlier, never later', { timeout: 60_000 }, async () => {
    const server = await start({ fps: 60, framesPerStep: 2 });
    const { client, shown } = await watcher(server);
    const random = rng(26);
    const used = new Set<number>([0]);
    const fresh = (): number => {
      let v: number;
      do v = 1 + Math.floor(random() * 0xfffffe);
      while (used.has(v));
      used.add(v);
      return v;
    };
    const sent: Array<{ kind: 'value' | 'painted'; v: number; applied: Promise<AppliedInfo> }> = [];
    for (let i = 0; i < 100; i++) {
      const v = fresh();
      const kind = random() < 0.7 ? 'value' : 'painted';
      const r = kind === 'value' ? client.command('set_value', { value: v }) : client.command('paint', { value: v });
      sent.push({ kind, v, applied: r.applied });
      // Back to back (some are superseded), within a step, or a few steps apart.
      const pause = random();
      if (pause < 0.3) continue;
      if (pause < 0.6) await r;
      else await sleep(random() * 60);
    }
    const outcomes = await Promise.all(sent.map((s) => s.applied));
    const last = Math.max(...outcomes.map((o) => (o.outcome === 'applied' ? o.seq : 0)));
    await until(() => [...shown.keys()].some((seq) => seq >= last), `frame ${last}`, 10_000);
    // One video track, no audio: seqs run on by one. Every frame came (raw RGB on loopback, a
    // reading client), so the frame just before each named one is there to be looked at.
    const seqs = [...shown.keys()].sort((x, y) => x - y);
    expect(seqs.at(-1)! - seqs[0]! + 1, 'frames missing (dropped for a slow client?)').toBe(seqs.length);

    let applied = 0;
    for (const [i, s] of sent.entries()) {
      const o = outcomes[i]!;
      const showing = [...shown.entries()].filter(([, p]) => p[s.kind] === s.v).map(([seq]) => seq);
      if (o.outcome === 'applied') {
        applied++;
        expect(o.track).toBe('main');
        // The one named shows it, none before it did.
        expect(shown.get(o.seq)?.[s.kind], `command ${i} (${s.kind} ${s.v}) named frame ${o.seq}`).toBe(s.v);
        expect(Math.min(...showing), `command ${i}: the first frame showing ${s.v}`).toBe(o.seq);
      } else {
        // Replaced before a frame was made of it: no frame ever showed it.
        expect(o.outcome).toBe('superseded');
        expect(showing, `command ${i} (${s.kind} ${s.v}) was superseded`).toEqual([]);
      }
    }
    // Many of them reach a frame (the back-to-back ones on one key may be superseded: a
    // just-in-time step reads the commands of its whole wait at once; 50-53 of 100 seen).
    expect(applied).toBeGreaterThan(35);
  });
});

describe('applied-at: the outcomes that name no frame', () => {
  it('superseded: a later setter on the same field ran before any step made a frame of the first; other keys are not', async () => {
    const server = await start();
    const { client, shown } = await watcher(server);
    // `slow` holds the step lock; the step loop's next turn queues behind it (within a step and
    // a frame interval); the three commands, sent later, queue behind both and run one after the
    // other: the loop asks for its next turn only once the step before them ran.
    const slow = client.command('slow', { ms: 500 });
    await sleep(150);
    const a = client.command('set_value', { value: 11 });
    const b = client.command('paint', { value: 12 });
    const c = client.command('set_value', { value: 13 });
    await Promise.all([slow, a, b, c]);
    expect(await a.applied).toEqual({ outcome: 'superseded' });
    const [sb, sc, ss] = await Promise.all([b.applied, c.applied, slow.applied]);
    expect(sb).toMatchObject({ outcome: 'applied', track: 'main' });
    // One step read both: the same frame, which shows both.
    expect(sc).toEqual(sb);
    const seq = (sb as { seq: number }).seq;
    await until(() => shown.has(seq), `frame ${seq}`, 5000);
    expect(shown.get(seq)).toEqual({ value: 13, painted: 12 });
    expect([...shown.values()].some((p) => p.value === 11)).toBe(false);
    // The slow event itself reached the frame of the step after it.
    expect(ss.outcome).toBe('applied');
    expect((ss as { seq: number }).seq).toBeLessThanOrEqual(seq);
  });

  it('paused: a step that read the change was refused (told at once); the change shows once steps run again', async () => {
    const server = await start();
    const { client, shown } = await watcher(server);
    const freeze = client.command('set_frozen', { frozen: true });
    await expect(freeze.applied).resolves.toEqual({ outcome: 'paused' });
    const v = client.command('set_value', { value: 42 });
    await expect(v.applied).resolves.toEqual({ outcome: 'paused' });
    const thaw = client.command('set_frozen', { frozen: false });
    const t = await thaw.applied;
    expect(t.outcome).toBe('applied');
    const seq = (t as { seq: number }).seq;
    await until(() => shown.has(seq), `frame ${seq}`, 5000);
    // The frame that names the thaw is the first with 42: the value was in place all along.
    expect(shown.get(seq)!.value).toBe(42);
    expect(Math.min(...[...shown].filter(([, p]) => p.value === 42).map(([s]) => s))).toBe(seq);
  });

  it('paused: this client paused the track when the frame played (it was not sent to it); another client hears applied', async () => {
    const server = await start();
    const { client, applied } = await watcher(server);
    const other = await watcher(server);
    await client.pauseTrack('main');
    const r = client.command('set_value', { value: 7 });
    await expect(r.applied).resolves.toEqual({ outcome: 'paused' });
    expect(applied.at(-1)).toEqual({ type: 'applied', id: expect.any(String), outcome: 'paused' });
    await client.resumeTrack('main');
    const r2 = other.client.command('set_value', { value: 8 });
    const o2 = await r2.applied;
    expect(o2.outcome).toBe('applied');
    await until(() => other.shown.has((o2 as { seq: number }).seq), 'the named frame', 5000);
    expect(other.shown.get((o2 as { seq: number }).seq)!.value).toBe(8);
    // Only the sender hears about its command: one each.
    expect(applied).toHaveLength(1);
    expect(other.applied).toEqual([{ type: 'applied', id: expect.any(String), outcome: 'applied', seq: (o2 as { seq: number }).seq, track: 'main' }]);
  });

  it('steps with no frame pass the command on; a flush passes it on too', async () => {
    const server = await start();
    const { client, shown } = await watcher(server);
    const blank = client.command('set_blank', { blank: true });
    const v = client.command('set_value', { value: 99 });
    await Promise.all([blank, v]);
    // Steps run but make no frame: both wait.
    await sleep(150);
    let settled = false;
    void v.applied.then(() => (settled = true));
    await sleep(0);
    expect(settled).toBe(false);
    const unblank = client.command('set_blank', { blank: false });
    const [ob, ov, ou] = await Promise.all([blank.applied, v.applied, unblank.applied]);
    expect(ob).toEqual({ outcome: 'superseded' });
    expect(ov).toEqual(ou);
    const seq = (ov as { seq: number }).seq;
    await until(() => shown.has(seq), `frame ${seq}`, 5000);
    expect(shown.get(seq)!.value).toBe(99);
    expect(Math.min(...[...shown].filter(([, p]) => p.value === 99).map(([s]) => s))).toBe(seq);

    // A value then a flush behind it: frames dropped unplayed do not count.
    const w = client.command('set_value', { value: 100 });
    const f = client.command('flush');
    const [ow, of] = await Promise.all([w.applied, f.applied]);
    expect(ow.outcome).toBe('applied');
    expect(of.outcome).toBe('applied');
    const seqW = (ow as { seq: number }).seq;
    await until(() => shown.has(Math.max(seqW, (of as { seq: number }).seq)), 'the named frames', 5000);
    expect(shown.get(seqW)!.value).toBe(100);
    expect(Math.min(...[...shown].filter(([, p]) => p.value === 100).map(([s]) => s))).toBe(seqW);
  });

  it('ended: the session ended before a frame was made of it (told by the server)', async () => {
    const server = await start();
    const { client, applied } = await watcher(server);
    const crash = client.command('crash');
    await crash;
    await expect(crash.applied).resolves.toEqual({ outcome: 'ended' });
    expect(applied.some((m) => m.outcome === 'ended')).toBe(true);
  });
});

describe('applied-at in @reactor/client: commands that get no applied', () => {
  it('a failed command rejects .applied with its own error; unread, it reports no unhandled rejection', async () => {
    const server = await start();
    const { client } = await watcher(server);
    const bad = client.command('set_value', { value: -1 });
    const err = await bad.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CommandFailedError);
    await expect(bad.applied).rejects.toBe(err);
    // Never read: vitest fails the run on an unhandled rejection.
    await client.command('set_value', { value: 'x' }).catch(() => undefined);
    await client.command('nope').catch(() => undefined);
    await sleep(50);
  });

  it('the client closed while the outcome was still to come: .applied resolves ended', async () => {
    const server = await start();
    const { client } = await watcher(server);
    await client.command('set_blank', { blank: true });
    const v = client.command('set_value', { value: 5 });
    await v;
    client.close();
    await expect(v.applied).resolves.toEqual({ outcome: 'ended' });
    // Sent after close: not connected; .applied rejects with the same error.
    const late = client.command('set_value', { value: 6 });
    const err = await late.catch((e: unknown) => e);
    await expect(late.applied).rejects.toBe(err);
  });

  it('a reload of the app (reactor dev: a new welcome on the same socket) ends the outcomes still owed', async () => {
    const first = new AppHost(painterApp(), { gracePeriodMs: 0, logger: quiet });
    await first.load();
    const swap = new HostSwitch(first, quiet);
    const server = await serveHost(swap, { port: 0, logger: quiet, encoding: 'rgb' });
    cleanups.push(() => server.close());
    const client = await connect(server.url, { WebSocket, reconnect: false });
    cleanups.push(() => client.close());
    await client.command('set_blank', { blank: true });
    const owed = client.command('set_value', { value: 5 });
    await owed;
    const welcomes: number[] = [];
    client.on('welcome', () => welcomes.push(welcomes.length));
    const { loadError } = await swap.replace(new AppHost(painterApp(), { gracePeriodMs: 0, logger: quiet }), { load: (h) => h.load() });
    expect(loadError).toBeUndefined();
    await expect(owed.applied).resolves.toEqual({ outcome: 'ended' });
    expect(welcomes).toHaveLength(1);
    // The new host acknowledges the commands it runs.
    const next = client.command('set_value', { value: 6 });
    await expect(next.applied).resolves.toMatchObject({ outcome: 'applied', track: 'main' });
  });
});

describe('applied-at with a WebRTC peer still connecting', () => {
  /** A peer connection that offers only relay candidates, with no TURN server: it stays connecting. */
  class NeverConnects extends RTCPeerConnection {
    constructor(config: object) {
      super({ ...config, iceTransportPolicy: 'relay' });
    }
  }

  it('names the RTP timestamp of a frame that went on the WebSocket, for the RTP frames after the switch', async () => {
    const server = await serve(painterApp({}), { port: 0, gracePeriodMs: 0, logger: quiet, encoding: 'rgb', webrtc: { connectTimeoutMs: 30_000 } });
    cleanups.push(() => server.close());
    await server.loaded;
    const { client, shown } = await watcher(server);
    const link = WebRtcLink.start(client, { RTCPeerConnection: NeverConnects as unknown as RtcPeerConnectionConstructor, timeoutMs: 30_000 });
    link.ready.catch(() => undefined);
    cleanups.push(() => link.close());
    await until(() => server.connections()[0]?.webrtc?.state === 'connecting', 'the server peer connecting', 10_000);
    const applied = await client.command('set_value', { value: 7 }).applied;
    expect(applied).toMatchObject({ outcome: 'applied', track: 'main', rtpTimestamp: expect.any(Number) });
    // The frame it names went on the WebSocket (the peer never connected).
    await until(() => shown.has((applied as { seq: number }).seq), 'the frame on the WebSocket', 10_000);
    expect(shown.get((applied as { seq: number }).seq)!.value).toBe(7);
  });
});
