/**
 * An MP4 file from RGB frames (`reactor replay`, issue 41): H.264 through the same encoder the
 * server streams with (`@napi-rs/webcodecs`), muxed by the recording muxer
 * ({@link FragmentedMp4Writer}), a key frame every second.
 */
import { type FileHandle, open } from 'node:fs/promises';
import { type CodedVideoEncoder, avcCodecString, webCodecsEncoderFactory } from '../video/video-encoder.js';
import { annexBToAvcc, avcDecoderConfigurationRecord } from './avc.js';
import type { VideoStreamConfig } from './media-ring.js';
import { FragmentedMp4Writer } from './mp4.js';

/** An MP4 file being written from RGB frames of one size. */
export class RgbMp4File {
  #frames = 0;
  #bytes = 0;
  #config: VideoStreamConfig | undefined;
  #failed: unknown;

  private constructor(
    private readonly file: FileHandle,
    private readonly encoder: CodedVideoEncoder,
    private readonly writer: FragmentedMp4Writer,
    private readonly width: number,
    private readonly height: number,
    private readonly fps: number,
  ) {}

  /**
   * Opens `path` for frames of `width` x `height` (even numbers) at `fps`.
   * @throws the encoder's error when H.264 is not available on this machine
   */
  static async open(path: string, width: number, height: number, fps: number, bitrate = 8_000_000): Promise<RgbMp4File> {
    const encoder = await webCodecsEncoderFactory({ codec: 'h264', width, height, bitrate, framerate: fps });
    const file = await open(path, 'w');
    const box: { self?: RgbMp4File } = {};
    const writer = new FragmentedMp4Writer(file, false, {
      onWrite: (size) => {
        if (box.self) box.self.#bytes = size;
      },
      onError: (err) => {
        if (box.self) box.self.#failed = err;
      },
    });
    box.self = new RgbMp4File(file, encoder, writer, width, height, fps);
    return box.self;
  }

  /** Encodes and adds one frame (RGB24, the file's size). */
  async add(rgb: Uint8Array): Promise<void> {
    if (this.#failed !== undefined) throw this.#failed as Error;
    const n = this.#frames++;
    const ptsUs = Math.round((n * 1e6) / this.fps);
    const chunk = await this.encoder.encode(rgb, ptsUs, n % Math.max(1, Math.round(this.fps)) === 0);
    if (!chunk) return;
    const avcc = annexBToAvcc(chunk.data);
    if (!avcc) return;
    if (avcc.sps && avcc.pps) {
      this.#config = {
        codec: avcCodecString(chunk.data) ?? 'avc1.42E01F',
        width: this.width,
        height: this.height,
        description: avcDecoderConfigurationRecord(avcc.sps, avcc.pps),
      };
    }
    if (!this.#config) return;
    await this.writer.addVideo({ data: avcc.data, key: chunk.key, ptsUs, config: this.#config });
  }

  /** Finishes and closes the file; its frames and bytes. */
  async close(): Promise<{ frames: number; bytes: number }> {
    try {
      await this.writer.finish();
    } finally {
      this.encoder.close();
      await this.file.close();
    }
    return { frames: this.#frames, bytes: this.#bytes };
  }
}
