import { describe, expect, it } from 'vitest';
import { sniffMimeType } from '../../src/index.js';
import { mimeMatches } from '../../src/internal.js';

const b = (...parts: Array<string | number[]>): Uint8Array =>
  Uint8Array.from(parts.flatMap((p) => (typeof p === 'string' ? [...p].map((c) => c.charCodeAt(0)) : p)));

describe('sniffMimeType', () => {
  it.each([
    ['image/png', b([0x89], 'PNG', [0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13], 'IHDR')],
    ['image/jpeg', b([0xff, 0xd8, 0xff, 0xe0, 0, 16], 'JFIF')],
    ['image/gif', b('GIF89a', [1, 0, 1, 0])],
    ['image/webp', b('RIFF', [0x24, 0, 0, 0], 'WEBPVP8 ')],
    ['audio/wav', b('RIFF', [0x24, 0, 0, 0], 'WAVEfmt ')],
    ['audio/mpeg', b('ID3', [4, 0, 0])],
    ['audio/mpeg', b([0xff, 0xfb, 0x90, 0x64])],
    ['video/mp4', b([0, 0, 0, 0x20], 'ftypisom', [0, 0, 2, 0])],
    ['video/quicktime', b([0, 0, 0, 0x14], 'ftypqt  ', [0, 0, 2, 0])],
    ['audio/mp4', b([0, 0, 0, 0x20], 'ftypM4A ', [0, 0, 2, 0])],
    ['video/webm', b([0x1a, 0x45, 0xdf, 0xa3, 0x9f, 0x42, 0x86, 0x81, 1, 0x42, 0x82, 0x84], 'webm')],
    ['application/pdf', b('%PDF-1.4\n')],
  ])('recognizes %s from its first bytes', (type, head) => {
    expect(sniffMimeType(head)).toBe(type);
  });

  it('recognizes nothing else: text, an ELF binary, Matroska that is not WebM, a shell script named .png', () => {
    expect(sniffMimeType(b('hello, world'))).toBeUndefined();
    expect(sniffMimeType(b([0x7f], 'ELF', [2, 1, 1]))).toBeUndefined();
    expect(sniffMimeType(b([0x1a, 0x45, 0xdf, 0xa3, 0x9f, 0x42, 0x82, 0x88], 'matroska'))).toBeUndefined();
    expect(sniffMimeType(b('#!/bin/sh\nrm -rf /'))).toBeUndefined();
    expect(sniffMimeType(new Uint8Array(0))).toBeUndefined();
  });

  it('matches types against field patterns, families included', () => {
    expect(mimeMatches('image/png', ['image/*'])).toBe(true);
    expect(mimeMatches('image/png', ['image/jpeg', 'image/png'])).toBe(true);
    expect(mimeMatches('application/pdf', ['image/*'])).toBe(false);
    expect(mimeMatches('video/mp4', ['*'])).toBe(true);
  });
});
