/**
 * How a chunk is split across ranks. A chunk of `frames` frames of `height` rows is one run of
 * `frames · height` pixel rows, frame after frame; rank `r` of `worldSize` computes the rows
 * `[floor(r·T/W), floor((r+1)·T/W))`. Shares differ by at most one row for any world size and
 * any chunk length (even one frame), and concatenating the shares in rank order gives the chunk
 * in its final layout, so gathering needs one copy per share and no reordering.
 */

/** A rank's share of a chunk, in global rows. */
export interface RowShare {
  /** First global row (frame · height + y). */
  start: number;
  /** One past the last global row. */
  end: number;
}

/** A piece of one frame inside a rank's share. */
export interface FrameSegment {
  /** Frame index inside the chunk. */
  frame: number;
  /** Rows `[y0, y1)` of that frame. */
  y0: number;
  y1: number;
}

/** The rows rank `rank` of `worldSize` computes in a chunk of `totalRows` rows. */
export function rowShare(totalRows: number, worldSize: number, rank: number): RowShare {
  return {
    start: Math.floor((rank * totalRows) / worldSize),
    end: Math.floor(((rank + 1) * totalRows) / worldSize),
  };
}

/** Splits a share into per-frame row ranges. */
export function frameSegments(share: RowShare, height: number): FrameSegment[] {
  const out: FrameSegment[] = [];
  let row = share.start;
  while (row < share.end) {
    const frame = Math.floor(row / height);
    const y0 = row - frame * height;
    const y1 = Math.min(height, y0 + (share.end - row));
    out.push({ frame, y0, y1 });
    row += y1 - y0;
  }
  return out;
}
