/**
 * The type of an uploaded file, read from its first bytes (magic numbers), never from the
 * client's claim. Only the types listed here are accepted at all; a field narrows them further
 * with `@UploadField({ mimeTypes })`.
 */

/** Bytes the sniffer needs to decide (it decides earlier when the file is shorter). */
export const SNIFF_BYTES = 64;

/** Every type an upload may have: what {@link sniffMimeType} recognizes. */
export const UPLOAD_MIME_TYPES = [
  'image/png',
  'image/jpeg',
  'image/webp',
  'image/gif',
  'audio/wav',
  'audio/mpeg',
  'audio/mp4',
  'video/mp4',
  'video/quicktime',
  'video/webm',
  'application/pdf',
] as const;
export type UploadMimeType = (typeof UPLOAD_MIME_TYPES)[number];

/** Image types `UploadedFile.image()` decodes. */
export const IMAGE_MIME_TYPES: readonly string[] = ['image/png', 'image/jpeg', 'image/webp', 'image/gif'];

const ascii = (b: Uint8Array, at: number, text: string): boolean => {
  if (b.length < at + text.length) return false;
  for (let i = 0; i < text.length; i++) if (b[at + i] !== text.charCodeAt(i)) return false;
  return true;
};

const bytes = (b: Uint8Array, at: number, sig: readonly number[]): boolean => b.length >= at + sig.length && sig.every((x, i) => b[at + i] === x);

/**
 * The type of a file from its first bytes ({@link SNIFF_BYTES} of them, or all when shorter),
 * or `undefined` when it is none of {@link UPLOAD_MIME_TYPES}.
 */
export function sniffMimeType(head: Uint8Array): UploadMimeType | undefined {
  if (bytes(head, 0, [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) return 'image/png';
  if (bytes(head, 0, [0xff, 0xd8, 0xff])) return 'image/jpeg';
  if (ascii(head, 0, 'GIF87a') || ascii(head, 0, 'GIF89a')) return 'image/gif';
  if (ascii(head, 0, 'RIFF') && ascii(head, 8, 'WEBP')) return 'image/webp';
  if (ascii(head, 0, 'RIFF') && ascii(head, 8, 'WAVE')) return 'audio/wav';
  if (ascii(head, 0, '%PDF-')) return 'application/pdf';
  if (ascii(head, 0, 'ID3')) return 'audio/mpeg';
  // An MPEG audio frame header without an ID3 tag: 11 sync bits, a layer (bits 1-2) that is not 0.
  if (head.length >= 2 && head[0] === 0xff && (head[1]! & 0xe0) === 0xe0 && (head[1]! & 0x06) !== 0) return 'audio/mpeg';
  if (ascii(head, 4, 'ftyp')) {
    const brand = String.fromCharCode(...head.subarray(8, 12));
    if (brand === 'qt  ') return 'video/quicktime';
    if (brand === 'M4A ' || brand === 'M4B ') return 'audio/mp4';
    return 'video/mp4';
  }
  // EBML (Matroska family): WebM names its DocType "webm" in the header.
  if (bytes(head, 0, [0x1a, 0x45, 0xdf, 0xa3])) {
    for (let i = 4; i + 4 <= head.length; i++) if (ascii(head, i, 'webm')) return 'video/webm';
    return undefined;
  }
  return undefined;
}

/** Whether `mimeType` is one of `patterns` (`image/png`, or a family: `image/*`, or `*`). */
export function mimeMatches(mimeType: string, patterns: readonly string[]): boolean {
  const family = mimeType.split('/')[0];
  return patterns.some((p) => p === '*' || p === '*/*' || p === mimeType || (p.endsWith('/*') && p.slice(0, -2) === family));
}

/** Whether a string looks like a MIME type or a family pattern (`image/png`, `image/*`). */
export function isMimePattern(p: unknown): p is string {
  return typeof p === 'string' && /^([a-z0-9][a-z0-9.+-]*\/([a-z0-9][a-z0-9.+-]*|\*)|\*|\*\/\*)$/.test(p);
}
