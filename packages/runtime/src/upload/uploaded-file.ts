import { readFile } from 'node:fs/promises';
import type { UploadInfo } from '@reactor/protocol';
import { RuntimeErrorCode, UploadError } from '../errors/errors.js';
import { IMAGE_MIME_TYPES } from './sniff.js';

/** A decoded picture: RGB24 pixels, `height * width * 3` bytes, rows top to bottom. */
export interface ImageFrame {
  readonly data: Uint8Array;
  readonly width: number;
  readonly height: number;
}

/**
 * Turns an image file's bytes into RGB24 (the first frame of an animated one). The host has
 * none of its own (the app model does not depend on an image library): the server injects one
 * (sharp) through `uploads.configure({ decodeImage })`.
 */
export type ImageDecoder = (bytes: Uint8Array, mimeType: string) => Promise<ImageFrame>;

/** What the store tells a file about itself; not app-facing. */
export interface UploadedFileSource {
  readonly id: string;
  readonly name: string;
  readonly mimeType: string;
  readonly size: number;
  readonly path: string;
  /** Whether the file still exists (false once its session ended). */
  readonly present: () => boolean;
  readonly decodeImage: () => ImageDecoder | undefined;
}

/**
 * A file a client uploaded (`POST /uploads`, then `PUT /uploads/{id}`), as the app receives it:
 * the value of an `@UploadField` state field or event parameter, and the argument of
 * `@fileUploaded` hooks. Its bytes live in the session's temporary folder until the session
 * ends; read them before that.
 *
 * @example
 * @event({ name: 'set_image', params: SetImageParams })
 * async setImage(p: SetImageParams) {
 *   const { data, width, height } = await p.image.image();   // RGB24
 *   this.model.steer(data, width, height);
 * }
 */
export class UploadedFile {
  /** The upload id (what commands refer to: `{"uploadId": "..."}`). */
  readonly id: string;
  /** The name the client gave, for display only: never a path. */
  readonly name: string;
  /** The type found in the bytes (`image/png`, ...), not the client's claim. */
  readonly mimeType: string;
  /** Byte size. */
  readonly size: number;
  readonly #src: UploadedFileSource;
  #image: Promise<ImageFrame> | undefined;

  /** @internal Built by the host's upload store. */
  constructor(source: UploadedFileSource) {
    this.#src = source;
    this.id = source.id;
    this.name = source.name;
    this.mimeType = source.mimeType;
    this.size = source.size;
  }

  /** Whether {@link image} can decode it (PNG, JPEG, WebP, GIF). */
  get isImage(): boolean {
    return IMAGE_MIME_TYPES.includes(this.mimeType);
  }

  /**
   * Where the bytes are on disk (a file named by the upload id in the session's temporary
   * folder), for a tool that reads files. Deleted when the session ends.
   */
  get path(): string {
    return this.#src.path;
  }

  /**
   * The file's bytes (a fresh copy on each call).
   * @throws UploadError `upload_gone` once the session that received it has ended.
   */
  async bytes(): Promise<Uint8Array> {
    this.#checkPresent();
    try {
      const buf = await readFile(this.#src.path);
      return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
    } catch (cause) {
      if (!this.#src.present()) this.#checkPresent();
      throw cause;
    }
  }

  /**
   * The picture as RGB24 (decoded once, then cached; an animated GIF or WebP gives its first
   * frame). Treat the returned bytes as read-only.
   * @throws UploadError `not_an_image` for another type or undecodable pixels, `no_image_decoder`
   *   in a host without a decoder, `upload_gone` after the session ended.
   */
  image(): Promise<ImageFrame> {
    this.#image ??= this.#decode();
    return this.#image;
  }

  async #decode(): Promise<ImageFrame> {
    if (!this.isImage) {
      throw new UploadError(RuntimeErrorCode.NotAnImage, `upload ${JSON.stringify(this.name)} is ${this.mimeType}, not an image (PNG, JPEG, WebP or GIF)`);
    }
    const decode = this.#src.decodeImage();
    if (!decode) {
      throw new UploadError(
        RuntimeErrorCode.NoImageDecoder,
        'this app host has no image decoder: the server provides one; an in-process host needs host.uploads.configure({ decodeImage })',
      );
    }
    const data = await this.bytes();
    try {
      return await decode(data, this.mimeType);
    } catch (cause) {
      this.#image = undefined;
      throw new UploadError(
        RuntimeErrorCode.NotAnImage,
        `upload ${JSON.stringify(this.name)} cannot be decoded as ${this.mimeType}: ${(cause as Error)?.message ?? String(cause)}`,
        {
          cause,
        },
      );
    }
  }

  /** What clients see of it (in `state`, in `UploadInfo`). */
  toJSON(): UploadInfo {
    return { uploadId: this.id, name: this.name, mimeType: this.mimeType, size: this.size };
  }

  #checkPresent(): void {
    if (!this.#src.present()) {
      this.#image = undefined;
      throw new UploadError(RuntimeErrorCode.UploadGone, `upload ${JSON.stringify(this.name)} (${this.id}) is gone: its session ended, and its file with it`);
    }
  }
}
