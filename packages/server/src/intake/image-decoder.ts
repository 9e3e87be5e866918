/**
 * The image decoder the server gives its host for `UploadedFile.image()`: sharp (libvips), off
 * the event loop, any of the accepted image types to RGB24.
 */
import sharp from 'sharp';
import type { ImageDecoder, ImageFrame } from '@reactor/runtime';

/** Largest picture decoded, in pixels (about 8K x 6K): a bigger one is refused, not decoded into gigabytes. */
export const MAX_DECODED_PIXELS = 50_000_000;

/** Decodes PNG, JPEG, WebP or GIF (its first frame) to RGB24; alpha is dropped, grey expanded to RGB. */
export const decodeImage: ImageDecoder = async (bytes: Uint8Array): Promise<ImageFrame> => {
  const { data, info } = await sharp(bytes, { limitInputPixels: MAX_DECODED_PIXELS, pages: 1 })
    .toColourspace('srgb')
    .removeAlpha()
    .raw()
    .toBuffer({ resolveWithObject: true });
  if (info.channels !== 3) throw new Error(`decoded to ${info.channels} channels, not RGB`);
  return { data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength), width: info.width, height: info.height };
};
