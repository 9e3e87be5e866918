/**
 * H.264 access units from the encoder's Annex B (start codes) into the length-prefixed form MP4
 * holds, with the `avcC` record (AVCDecoderConfigurationRecord) built from the stream's SPS and
 * PPS. Done once per frame as it enters the clip ring, so a clip's muxing does not scan 30 s of
 * video for start codes.
 */

/** One access unit, length-prefixed (4-byte big-endian lengths), and the parameter sets it carried. */
export interface AvccUnit {
  data: Uint8Array;
  sps: Uint8Array | undefined;
  pps: Uint8Array | undefined;
}

/** Splits an Annex B access unit into NAL units (start codes of 3 or 4 bytes). */
function nalUnits(au: Uint8Array): Uint8Array[] {
  const out: Uint8Array[] = [];
  let start = -1;
  let i = 0;
  const n = au.length;
  while (i + 2 < n) {
    if (au[i] === 0 && au[i + 1] === 0 && au[i + 2] === 1) {
      if (start >= 0) {
        // A 4-byte start code's leading zero belongs to it, not to the previous unit.
        let end = i;
        if (end > start && au[end - 1] === 0) end--;
        out.push(au.subarray(start, end));
      }
      i += 3;
      start = i;
    } else {
      i++;
    }
  }
  if (start >= 0 && start < n) out.push(au.subarray(start));
  return out;
}

/**
 * Converts one Annex B access unit (access unit delimiters dropped; SPS and PPS kept in band,
 * as mediabunny itself keeps them, and returned).
 * @returns `undefined` when it holds no NAL unit (not Annex B).
 */
export function annexBToAvcc(au: Uint8Array): AvccUnit | undefined {
  const units = nalUnits(au).filter((u) => u.length > 0 && (u[0]! & 0x1f) !== 9);
  if (units.length === 0) return undefined;
  let sps: Uint8Array | undefined;
  let pps: Uint8Array | undefined;
  let size = 0;
  for (const u of units) {
    const type = u[0]! & 0x1f;
    if (type === 7) sps ??= u;
    if (type === 8) pps ??= u;
    size += 4 + u.length;
  }
  const data = new Uint8Array(size);
  const view = new DataView(data.buffer);
  let o = 0;
  for (const u of units) {
    view.setUint32(o, u.length);
    data.set(u, o + 4);
    o += 4 + u.length;
  }
  return { data, sps: sps && sps.slice(), pps: pps && pps.slice() };
}

/** The `avcC` record of one SPS and one PPS (4-byte lengths; 4:2:0 8-bit for the High profiles). */
export function avcDecoderConfigurationRecord(sps: Uint8Array, pps: Uint8Array): Uint8Array {
  const profile = sps[1]!;
  const high = [100, 110, 122, 144].includes(profile);
  const out = new Uint8Array(11 + sps.length + pps.length + (high ? 4 : 0));
  out.set([1, profile, sps[2]!, sps[3]!, 0xff, 0xe1, sps.length >> 8, sps.length & 0xff], 0);
  out.set(sps, 8);
  let o = 8 + sps.length;
  out.set([1, pps.length >> 8, pps.length & 0xff], o);
  out.set(pps, o + 3);
  o += 3 + pps.length;
  if (high) out.set([0xfd, 0xf8, 0xf8, 0x00], o);
  return out;
}
