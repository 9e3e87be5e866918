import { describe, expect, it } from 'vitest';
import { FrameEncoding, decodeFrame, encodeFrame, type FrameHeader } from '@reactor/protocol';
import { codedWireMessage } from '../src/ws/coded-wire.js';
import { sharedH264Payloads, packetizeH264 } from '../src/webrtc/rtp-packetize.js';
import type { CodedFrame } from '../src/video/video-streams.js';

const config: CodedFrame['config'] = { type: 'video_config', track: 'main', codec: 'h264', codecString: 'avc1.42E01F', width: 64, height: 48, tier: 'full' };
const header: FrameHeader = { encoding: FrameEncoding.H264, track: 1, seq: 42, ptsMs: 1400.5, width: 64, height: 48, key: true, metadata: { chunk: 3 } };

describe('a coded frame on each media path', () => {
  it('the WebSocket message is its header then its access unit, made once for every WebSocket client', () => {
    const data = new Uint8Array([0, 0, 0, 1, 0x67, 1, 2, 3, 0, 0, 0, 1, 0x65, 9, 9]);
    const frame: CodedFrame = { data, key: true, config, header };
    const wire = codedWireMessage(frame);
    expect(Buffer.compare(wire, Buffer.from(encodeFrame(header, data)))).toBe(0);
    const decoded = decodeFrame(wire);
    expect(decoded).toMatchObject({ seq: 42, track: 1, key: true, width: 64, metadata: { chunk: 3 } });
    expect(Buffer.from(decoded.payload)).toEqual(Buffer.from(data));
    // A second client of the same frame: the same buffer, nothing encoded again.
    expect(codedWireMessage(frame)).toBe(wire);
    // Another frame with equal content is its own message.
    expect(codedWireMessage({ ...frame })).not.toBe(wire);
  });

  it('RTP takes the access unit as the encoder wrote it: no header to strip', () => {
    const data = new Uint8Array([0, 0, 0, 1, 0x65, ...new Array(40).fill(7)]);
    const frame: CodedFrame = { data, key: true, config, header };
    expect(sharedH264Payloads(frame)).toEqual(packetizeH264(data));
    // The WebSocket message leaves the access unit untouched.
    codedWireMessage(frame);
    expect(frame.data).toBe(data);
  });
});
