/**
 * RTP payloads of the frames the shared encoders make (werift carries RTP but has no
 * packetizers). H.264 per RFC 6184 (packetization-mode 1: one NAL unit per packet, FU-A for a
 * NAL unit larger than the MTU); VP8 per RFC 7741 (a payload descriptor with a 15-bit PictureID);
 * Opus per RFC 7587 (one Opus packet per RTP packet, the payload as it is).
 *
 * An H.264 frame is packetized once, whatever the number of viewers of its encoder
 * ({@link sharedH264Payloads}); each viewer only makes its own RTP headers. VP8 payloads carry
 * the viewer's own PictureID in their descriptor, so they are made per viewer.
 */

/** Largest RTP payload we make: leaves room for the RTP header, extensions, SRTP and a TURN hop under a 1280-byte path MTU. */
export const RTP_MAX_PAYLOAD = 1100;

/** The NAL units of an Annex B access unit (start codes removed). */
export function annexBNalUnits(au: Uint8Array): Uint8Array[] {
  const out: Uint8Array[] = [];
  let start = -1;
  let i = 0;
  while (i + 2 < au.length) {
    if (au[i] === 0 && au[i + 1] === 0 && (au[i + 2] === 1 || (au[i + 2] === 0 && i + 3 < au.length && au[i + 3] === 1))) {
      const startCode = au[i + 2] === 1 ? 3 : 4;
      if (start >= 0) out.push(trimTrailingZeros(au.subarray(start, i)));
      i += startCode;
      start = i;
    } else {
      i++;
    }
  }
  if (start >= 0 && start < au.length) out.push(au.subarray(start));
  return out.filter((n) => n.length > 0);
}

function trimTrailingZeros(nal: Uint8Array): Uint8Array {
  let end = nal.length;
  while (end > 0 && nal[end - 1] === 0) end--;
  return nal.subarray(0, end);
}

/** RTP payloads of one H.264 access unit (Annex B), in order; the last one carries the marker bit. */
export function packetizeH264(au: Uint8Array, mtu = RTP_MAX_PAYLOAD): Buffer[] {
  const out: Buffer[] = [];
  for (const nal of annexBNalUnits(au)) {
    const type = nal[0]! & 0x1f;
    // Access unit delimiters carry nothing a WebRTC receiver needs.
    if (type === 9) continue;
    if (nal.length <= mtu) {
      out.push(Buffer.from(nal.buffer, nal.byteOffset, nal.byteLength));
      continue;
    }
    // FU-A: indicator (F, NRI of the NAL, type 28), header (S, E, the NAL's type), a fragment.
    const indicator = (nal[0]! & 0xe0) | 28;
    for (let off = 1; off < nal.length;) {
      const len = Math.min(mtu - 2, nal.length - off);
      const p = Buffer.allocUnsafe(len + 2);
      p[0] = indicator;
      p[1] = (off === 1 ? 0x80 : 0) | (off + len >= nal.length ? 0x40 : 0) | type;
      p.set(nal.subarray(off, off + len), 2);
      out.push(p);
      off += len;
    }
  }
  return out;
}

/** The H.264 payloads of each coded frame, keyed by its access unit (one buffer per frame, shared by every client of its encoder). */
const h264PayloadsOf = new WeakMap<Uint8Array, readonly Buffer[]>();

/**
 * The RTP payloads of one coded H.264 frame ({@link packetizeH264} of its access unit), made on
 * the first call and the same array for every later one: every WebRTC viewer of the frame's
 * encoder sends these buffers. They are read-only (werift keeps them to answer NACKs).
 * @param frame the frame as the shared encoder made it: its access unit.
 */
export function sharedH264Payloads(frame: { readonly data: Uint8Array }): readonly Buffer[] {
  let payloads = h264PayloadsOf.get(frame.data);
  if (!payloads) {
    payloads = packetizeH264(frame.data);
    h264PayloadsOf.set(frame.data, payloads);
  }
  return payloads;
}

/** RTP payloads of one VP8 frame, each with a payload descriptor (X, S on the first, a 15-bit PictureID). */
export function packetizeVp8(frame: Uint8Array, pictureId: number, mtu = RTP_MAX_PAYLOAD): Buffer[] {
  const out: Buffer[] = [];
  const pid = pictureId & 0x7fff;
  const room = mtu - 4;
  for (let off = 0; off < frame.length; off += room) {
    const len = Math.min(room, frame.length - off);
    const p = Buffer.allocUnsafe(len + 4);
    // X=1 (extensions follow), S=1 on the partition's first packet, PID=0.
    p[0] = 0x80 | (off === 0 ? 0x10 : 0);
    // I=1: a PictureID follows.
    p[1] = 0x80;
    // M=1: 15-bit PictureID.
    p[2] = 0x80 | (pid >> 8);
    p[3] = pid & 0xff;
    p.set(frame.subarray(off, off + len), 4);
    out.push(p);
  }
  return out;
}
