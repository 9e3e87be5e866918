/**
 * The stream's canvas: JPEG and raw frames drawn newest-first by `drawLoop`, coded video (WebCodecs)
 * drawn by `drawVideoFrame`; both share `viewer.lastSeq`, so an older frame is never drawn after a
 * newer one. Also the track picker, the fps counter and the coded-video status.
 */
import { FrameEncoding, type ClientFrame, type ReactorClient, type VideoOffer } from '@reactor/client';
import type * as ClientBrowser from '@reactor/client/browser';
import type { VideoReceiverClient } from '@reactor/client/browser';
import { $, el, logMessage } from './dom.js';
import { loadBrowser, viewer } from './hooks.js';
import { decoderCounters, framePresented, framesDropped } from './latency.js';

const canvas = $<HTMLCanvasElement>('stream');
const ctx = canvas.getContext('2d')!;
const trackSelect = $<HTMLSelectElement>('track');

let pending: ClientFrame | undefined;
let decoding = false;
let selectedTrack = 0;
const drawTimes: number[] = [];

export function onFrame(f: ClientFrame): void {
  if (f.track !== selectedTrack || viewer.video) return; // the receiver decodes and draws every frame then
  if (f.encoding === FrameEncoding.H264 || f.encoding === FrameEncoding.Vp8) return; // only the receiver decodes these
  if (pending) framesDropped(); // newest wins: a frame that arrives while one is decoding replaces the waiting one
  pending = f;
  if (!decoding) void drawLoop();
}

async function drawLoop(): Promise<void> {
  decoding = true;
  try {
    while (pending) {
      const f = pending;
      pending = undefined;
      if (f.seq <= viewer.lastSeq) continue;
      let decodedAt = 0;
      if (f.encoding === FrameEncoding.Jpeg) {
        const bitmap = await createImageBitmap(new Blob([f.payload as Uint8Array<ArrayBuffer>], { type: 'image/jpeg' }));
        decodedAt = performance.now();
        // The receiver may have drawn a newer picture while this one decoded.
        if (f.seq <= viewer.lastSeq) {
          bitmap.close();
          continue;
        }
        fitCanvas(f.width, f.height);
        ctx.drawImage(bitmap, 0, 0);
        bitmap.close();
      } else {
        fitCanvas(f.width, f.height);
        const rgba = new Uint8ClampedArray(f.width * f.height * 4);
        const src = f.payload;
        for (let i = 0, j = 0; i < src.length; i += 3, j += 4) {
          rgba[j] = src[i]!;
          rgba[j + 1] = src[i + 1]!;
          rgba[j + 2] = src[i + 2]!;
          rgba[j + 3] = 255;
        }
        decodedAt = performance.now();
        ctx.putImageData(new ImageData(rgba, f.width, f.height), 0, 0);
      }
      viewer.framesDrawn++;
      viewer.lastSeq = f.seq;
      framePresented(f.trackName, f.seq);
      $('seq').textContent = String(f.seq);
      drawTimes.push(performance.now());
      logDecoded({ seq: f.seq, receivedAt: f.receivedAt, decodedAt, encoding: f.encoding, key: true });
    }
  } catch (err) {
    framesDropped();
    console.error('cannot draw frame', err);
  } finally {
    decoding = false;
  }
}

/** Sizes the canvas to a frame of `w`x`h` (and says so), when it changed or nothing was drawn yet. */
function fitCanvas(w: number, h: number): void {
  if (canvas.width === w && canvas.height === h && viewer.framesDrawn > 0) return;
  canvas.width = w;
  canvas.height = h;
  $('size').textContent = `${w}x${h}`;
  canvas.parentElement!.style.aspectRatio = `${w} / ${h}`;
}

/** A picture from the coded-video receiver: drawn at once (the receiver closes it after this returns). */
function drawVideoFrame(frame: VideoFrame, info: ClientBrowser.DecodedVideoInfo): void {
  if (info.track !== viewer.client?.schema.tracks[selectedTrack]?.name) return;
  // Until the receiver's selection is answered both it and drawLoop draw JPEG frames: never go back.
  if (info.seq <= viewer.lastSeq) return;
  fitCanvas(frame.displayWidth, frame.displayHeight);
  ctx.drawImage(frame, 0, 0);
  viewer.framesDrawn++;
  viewer.lastSeq = info.seq;
  framePresented(info.track, info.seq);
  decoderCounters(info.track, viewer.video?.counters()[info.track]);
  $('seq').textContent = String(info.seq);
  const now = performance.now();
  drawTimes.push(now);
  logDecoded({ seq: info.seq, receivedAt: info.receivedAt ?? now, decodedAt: info.decodedAt, encoding: info.encoding, key: info.key });
}

/**
 * A picture of the WebRTC video (the `<video>` element playing the track, at its
 * `requestVideoFrameCallback`, whose metadata is `frame`): drawn on the same canvas, counted as
 * every other frame.
 */
export function drawRtcVideo(video: HTMLVideoElement, trackName: string, frame: VideoFrameCallbackMetadata): void {
  if (trackName !== viewer.client?.schema.tracks[selectedTrack]?.name || video.videoWidth === 0) return;
  fitCanvas(video.videoWidth, video.videoHeight);
  ctx.drawImage(video, 0, 0);
  viewer.framesDrawn++;
  drawTimes.push(performance.now());
  // Freezes, the first frame, the presentation rate and (by the frame's RTP timestamp) command-to-pixel are measured over WebRTC too (client_stats transport "webrtc").
  framePresented(trackName, undefined, frame.rtpTimestamp);
  // The frame number, live: frames this <video> presented (a WebRTC frame carries no session seq).
  if (viewer.media === 'webrtc') $('seq').textContent = String(frame.presentedFrames);
}

function logDecoded(entry: (typeof viewer.decodeLog)[number]): void {
  viewer.decodeLog.push(entry);
  if (viewer.decodeLog.length > 2000) viewer.decodeLog.splice(0, 1000);
}

export function clearCanvas(): void {
  pending = undefined;
  ctx.fillStyle = '#000';
  ctx.fillRect(0, 0, canvas.width, canvas.height);
}

setInterval(() => {
  const now = performance.now();
  while (drawTimes.length && drawTimes[0]! < now - 1000) drawTimes.shift();
  $('fps').textContent = String(drawTimes.length);
}, 250);

/** Fills the track picker from the schema (keeping the shown track when it is still there). */
export function buildTrackSelect(client: ReactorClient): void {
  // Only the app's video tracks can be shown; inbound tracks come first in the list.
  const shown = client.schema.tracks.map((t, i) => ({ t, i })).filter(({ t }) => t.direction !== 'in' && t.kind !== 'audio');
  trackSelect.replaceChildren(...shown.map(({ t, i }) => el('option', { value: String(i) }, t.name)));
  if (!shown.some(({ i }) => i === selectedTrack)) selectedTrack = shown[0]?.i ?? 0;
  trackSelect.value = String(selectedTrack);
}

trackSelect.addEventListener('change', () => {
  selectedTrack = Number(trackSelect.value);
  clearCanvas();
});

/** Megabits per second, one decimal. */
function mbps(bits: number): string {
  return `${(bits / 1e6).toFixed(bits < 1e6 ? 2 : 1)} Mbit/s`;
}

/**
 * Coded video when the server offers it (`welcome.video`) and this browser decodes one of its
 * codecs (WebCodecs `VideoDecoder.isConfigSupported`); otherwise nothing changes: JPEG frames,
 * drawn by `drawLoop`.
 */
export async function startVideo(client: ReactorClient, offer: VideoOffer | undefined): Promise<void> {
  if (!offer || !offer.codecs.some((c) => c !== 'jpeg')) return;
  const { VideoReceiver, hasWebCodecs, pickVideoCodec } = await loadBrowser();
  if (!hasWebCodecs() || (await pickVideoCodec(offer.codecs)) === 'jpeg') return;
  const receiver = new VideoReceiver(client satisfies VideoReceiverClient);
  receiver.on('frame', ({ frame, info }) => drawVideoFrame(frame, info));
  receiver.on('error', (e) => logMessage('video', e.message));
  receiver.on('tier', (d) => logMessage('video', `tier ${d.from} -> ${d.tier}: ${d.reason}`));
  const selection = await receiver.start(offer);
  if (!selection) {
    receiver.close();
    return;
  }
  viewer.video = receiver;
  viewer.videoSelectedAt = performance.now();
  pending = undefined;
  const show = (): void => {
    // Over WebRTC the link's stats fill these (transport.ts): the WebSocket receiver's would be stale.
    if (viewer.media === 'webrtc') return;
    $('codec').textContent = receiver.codec;
    $('tier').textContent = receiver.tier ?? '-';
    const bits = receiver.serverStats?.bitrate ?? receiver.reception?.bitrate;
    $('bitrate').textContent = bits === undefined ? '-' : mbps(bits);
  };
  show();
  receiver.on('selection', show);
  receiver.on('config', show);
  setInterval(show, 500);
}
