/**
 * Test scaffolding for the frame intake: a real {@link AppHost} of the input app served on port
 * 0, seen through a recorder on the transport seam (every `pushFrame` call the server makes, with
 * the host's answer), and helpers to build wire frames.
 */
import sharp from 'sharp';
import { encodeFrameHeader, type FrameEncoding, type ServerMessage } from '@reactor/client';
import { AppHost, type ClientHandle, type ClientInfo, type ClientSink, type InboundFrame, type InputFrame } from '@reactor/runtime';
import { serveHost, type ReactorServer, type ServableHost, type ServerOptions } from '../src/index.js';
import { quiet, useCleanups } from './fixtures/cleanups.js';
import { inputApp, type InputAppOptions } from './fixtures/input-app.js';
import { until } from '@reactor/test-kit';
import { RawClient } from './fixtures/net.js';

/** One `pushFrame` call the server made, and what the host answered. */
export interface PushedFrame {
  client: string;
  track: string;
  frame: InboundFrame;
  accepted: boolean;
}

/** The real host, with every `pushFrame` of its handles recorded on the way through. */
export class RecordingHost implements ServableHost {
  readonly pushed: PushedFrame[] = [];
  constructor(readonly inner: AppHost) {}
  get schema(): AppHost['schema'] {
    return this.inner.schema;
  }
  get status(): AppHost['status'] {
    return this.inner.status;
  }
  readiness(): ReturnType<AppHost['readiness']> {
    return this.inner.readiness();
  }
  close(): Promise<void> {
    return this.inner.close();
  }
  connect(sink: ClientSink, info?: ClientInfo): ClientHandle {
    const h = this.inner.connect(sink, info);
    return {
      id: h.id,
      command: (m) => h.command(m),
      publish: (id, track) => h.publish(id, track),
      unpublish: (id, track) => h.unpublish(id, track),
      publishes: (track) => h.publishes(track),
      pushFrame: (track, frame) => {
        const accepted = h.pushFrame(track, frame);
        this.pushed.push({ client: h.id, track, frame, accepted });
        return accepted;
      },
      disconnect: () => h.disconnect(),
      reportDropped: (n) => h.reportDropped(n),
      rebind: (s) => h.rebind(s),
      requestControl: (id) => h.requestControl(id),
      releaseControl: (id) => h.releaseControl(id),
      controlError: (id, what) => h.controlError(id, what),
    };
  }
}

/** The frames the input app read from its buffers (`this.input.<track>`), in the order it read them. */
export interface ReadFrames {
  webcam: InputFrame[];
  mic: InputFrame[];
}

/** `start()`: a loaded input app served on port 0 (closed after each test), with its recorder. */
export function useInputServers(): {
  start(opts?: ServerOptions & InputAppOptions): Promise<{ server: ReactorServer; host: RecordingHost; read: ReadFrames }>;
  client(server: ReactorServer): Promise<RawClient>;
  cleanups: Array<() => unknown>;
} {
  const cleanups = useCleanups();
  return {
    cleanups,
    async start(opts = {}) {
      const { webcamMaxFps, ...serverOptions } = opts;
      const read: ReadFrames = { webcam: [], mic: [] };
      const onRead = (track: 'webcam' | 'mic', frames: InputFrame[]): void => void read[track].push(...frames);
      const inner = new AppHost(inputApp({ webcamMaxFps, onRead }), { gracePeriodMs: 0, logger: quiet, statsIntervalMs: 200 });
      await inner.load();
      const host = new RecordingHost(inner);
      const server = await serveHost(host, { port: 0, logger: quiet, ...serverOptions });
      cleanups.push(async () => {
        await server.close();
      });
      return { server, host, read };
    },
    async client(server) {
      const c = await new RawClient(server.wsUrl).open();
      cleanups.push(() => c.close());
      return c;
    },
  };
}

/** Sends `{type, id, track}` and waits for its answer. */
export async function ask(c: RawClient, type: 'publish' | 'unpublish', id: string, track: string): Promise<ServerMessage> {
  c.send({ type, id, track });
  return c.waitFor((m) => (m.type === 'reply' || m.type === 'error') && m.id === id);
}

/** A binary wire frame: header (+ metadata) then `payload`. */
export function wireFrame(
  h: { track: number; encoding: number; width: number; height: number; ptsMs?: number; seq?: number; metadata?: unknown },
  payload: Uint8Array,
): Buffer {
  const header = encodeFrameHeader({
    track: h.track,
    encoding: h.encoding as FrameEncoding,
    width: h.width,
    height: h.height,
    ptsMs: h.ptsMs ?? 0,
    seq: h.seq ?? 0,
    metadata: h.metadata,
  });
  return Buffer.concat([header, payload]);
}

/** RGB24 of one colour. */
export function solidRgb(width: number, height: number, rgb: readonly [number, number, number]): Uint8Array {
  const out = new Uint8Array(width * height * 3);
  for (let i = 0; i < out.length; i += 3) out.set(rgb, i);
  return out;
}

/** A JPEG of one colour. */
export async function solidJpeg(width: number, height: number, rgb: readonly [number, number, number]): Promise<Uint8Array> {
  return new Uint8Array(
    await sharp(solidRgb(width, height, rgb), { raw: { width, height, channels: 3 } })
      .jpeg({ quality: 90 })
      .toBuffer(),
  );
}

/** Track indexes of the input app's schema (inbound first). */
export const TRACK = { webcam: 0, mic: 1, mainVideo: 2 } as const;

/** Resolves once `c` has received `n` more binary (outbound) frames than it had: the session still streams to it. */
export async function keepsStreaming(c: RawClient, n = 3): Promise<void> {
  const start = c.binaries.length;
  await until(() => c.binaries.length >= start + n, `${n} more frames streamed to the client`, 10_000);
  if (c.closeCode !== undefined) throw new Error(`the client was closed (${c.closeCode})`);
}

/** Errors of `code` the client has received so far. */
export function errorsOf(c: RawClient, code: string): ServerMessage[] {
  return c.texts.filter((m) => m.type === 'error' && m.code === code);
}
