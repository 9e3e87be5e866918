import { describe, expect, it } from 'vitest';
import { SharedMemoryCapacityError } from '../src/index.js';
import { decodeValue, encodeValue } from '../src/shm/codec.js';
import { SegmentReader, SegmentWriter, checkFits, listSegments, pidNamespace, processSegmentPrefix, sweepStaleSegments } from '../src/shm/segments.js';
import { existsSync, rmSync, writeFileSync } from 'node:fs';

describe.each(['native', 'file'] as const)('segments (%s backend)', (backend) => {
  const env = { backend, maxShmBytes: null };

  it('grows by at least doubling, unlinks the old generation, and readers follow', () => {
    const prefix = `reactor-${process.pid}-seg-${backend}`;
    const w = new SegmentWriter(env, `${prefix}-x`, 'test');
    const r = new SegmentReader(env);
    try {
      const small = w.write(encodeValue(new Uint8Array(100).fill(1)));
      expect(small.seg).toBe(`${prefix}-x-g1`);
      expect(listSegments(prefix)).toEqual([`${prefix}-x-g1`]);
      const first = decodeValue(JSON.stringify({ '\u0000ta': 0 }), [1, 0, 100], r.read(small)) as Uint8Array;
      expect(first[99]).toBe(1);
      const bigRef = w.write(encodeValue(new Uint8Array(3 << 20).fill(2)));
      expect(bigRef.seg).toBe(`${prefix}-x-g2`);
      expect(listSegments(prefix)).toEqual([`${prefix}-x-g2`]);
      const big = r.read(bigRef);
      expect(big[(3 << 20) - 1]).toBe(2);
      // The old view still points at valid memory after its file was unlinked.
      expect(first[0]).toBe(1);
    } finally {
      w.dispose();
      r.close();
    }
    expect(listSegments(prefix)).toEqual([]);
  });
});

describe('checkFits', () => {
  it('says how big, how much is free, and how to fix it', () => {
    expect(checkFits('x', 10, 100, null)).toBeNull();
    const err = checkFits("rank 0's results", 90 * 1024 * 1024, 64 * 1024 * 1024, null)!;
    expect(err).toBeInstanceOf(SharedMemoryCapacityError);
    expect(err).toMatchObject({ code: 'shm_capacity', neededBytes: 90 * 1024 * 1024, availableBytes: 64 * 1024 * 1024 });
    expect(err.message).toMatchInlineSnapshot(
      `"Shared memory for rank 0's results needs 90.0 MiB but only 64.0 MiB are free in /dev/shm. Raise the limit: give the container more shared memory (docker run --shm-size=2g; containers default to 64 MB), free space in /dev/shm, or raise options.maxShmBytes."`,
    );
  });
});

describe('sweepStaleSegments', () => {
  it('unlinks segments of runner processes of this pid namespace that no longer exist, and only those', () => {
    const ns = pidNamespace();
    const dead = `/dev/shm/reactor-999999999.${ns}-1-abc-in-g1`;
    const otherContainer = `/dev/shm/reactor-999999999.${ns}1-1-abc-in-g1`; // same pid, another pid namespace
    const mine = `/dev/shm/${processSegmentPrefix()}-sweep-in-g1`;
    for (const f of [dead, otherContainer, mine]) writeFileSync(f, '');
    try {
      sweepStaleSegments();
      expect(existsSync(dead)).toBe(false);
      expect(existsSync(otherContainer)).toBe(true);
      expect(existsSync(mine)).toBe(true);
    } finally {
      for (const f of [dead, otherContainer, mine]) rmSync(f, { force: true });
    }
  });
});
