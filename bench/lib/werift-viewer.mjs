// A werift peer connection as the benches' Node viewers make it: receive-only, offering H.264 as
// Chromium does (constrained baseline, packetization-mode 1) with NACK, PLI and REMB.

/** A new `RTCPeerConnection` of the given werift module (the checkout's own, as its server loads it). */
export function viewerPeerConnection(werift) {
  const { RTCPeerConnection, RTCRtpCodecParameters, useNACK, usePLI, useREMB } = werift;
  return new RTCPeerConnection({
    iceUseIpv6: false,
    codecs: {
      video: [
        new RTCRtpCodecParameters({
          mimeType: 'video/H264',
          clockRate: 90000,
          rtcpFeedback: [useNACK(), usePLI(), useREMB()],
          parameters: 'level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f',
        }),
      ],
    },
  });
}
