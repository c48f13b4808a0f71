// Digests of RTCPeerConnection state and `getStats()` for reports. Fields are copied as the
// browser names them (https://www.w3.org/TR/webrtc-stats/); one missing in this browser is null.
//
// digest(pc) = {
//   connectionState, iceConnectionState, signalingState,
//   transport: { dtlsState, iceState, selectedCandidatePairChanges, selectedCandidatePairId,
//                dtlsCipher, srtpCipher, pair: { state, local, remote, currentRoundTripTime } },
//   outbound: { audio: {...}, video: {...} },  // OUTBOUND fields + codec (mimeType), fmtp, ssrc
//   outboundLayers: { [rid]: {...} },           // each simulcast encoding's outbound stats
//   inbound:  { audio: {...}, video: {...} },  // INBOUND fields + codec (mimeType), fmtp, ssrc
// }

const OUTBOUND = [
  'packetsSent', 'bytesSent', 'framesEncoded', 'framesSent', 'keyFramesEncoded',
  'framesPerSecond', 'frameWidth', 'frameHeight', 'encoderImplementation',
  'qualityLimitationReason', 'nackCount', 'pliCount', 'firCount', 'retransmittedPacketsSent',
  'scalabilityMode',
];

const INBOUND = [
  'packetsReceived', 'packetsLost', 'bytesReceived', 'jitter', 'framesReceived', 'framesDecoded',
  'keyFramesDecoded', 'framesDropped', 'framesPerSecond', 'frameWidth', 'frameHeight',
  'freezeCount', 'totalFreezesDuration', 'decoderImplementation', 'nackCount', 'pliCount',
  'firCount', 'totalSamplesReceived', 'concealedSamples', 'retransmittedPacketsReceived',
];

const pick = (stat, fields) => Object.fromEntries(fields.map((f) => [f, stat[f] ?? null]));

const candidate = (c) =>
  c ? { address: c.address, port: c.port, protocol: c.protocol, candidateType: c.candidateType, url: c.url ?? null } : null;

export async function digest(pc) {
  const out = {
    connectionState: pc.connectionState,
    iceConnectionState: pc.iceConnectionState,
    signalingState: pc.signalingState,
    transport: null,
    outbound: {},
    outboundLayers: {},
    inbound: {},
  };
  const stats = await pc.getStats();
  for (const s of stats.values()) {
    if (s.type === 'transport') {
      const pair = stats.get(s.selectedCandidatePairId);
      out.transport = {
        dtlsState: s.dtlsState,
        iceState: s.iceState ?? null,
        selectedCandidatePairChanges: s.selectedCandidatePairChanges ?? null,
        selectedCandidatePairId: s.selectedCandidatePairId ?? null,
        dtlsCipher: s.dtlsCipher ?? null,
        srtpCipher: s.srtpCipher ?? null,
        pair: pair
          ? {
              state: pair.state,
              local: candidate(stats.get(pair.localCandidateId)),
              remote: candidate(stats.get(pair.remoteCandidateId)),
              currentRoundTripTime: pair.currentRoundTripTime ?? null,
            }
          : null,
      };
    } else if (s.type === 'outbound-rtp' || s.type === 'inbound-rtp') {
      const outbound = s.type === 'outbound-rtp';
      const d = pick(s, outbound ? OUTBOUND : INBOUND);
      const codec = stats.get(s.codecId);
      d.codec = codec?.mimeType ?? null;
      d.fmtp = codec?.sdpFmtpLine ?? null;
      d.ssrc = s.ssrc;
      // Without simulcast there is one stream per kind; should there be more, keep the busiest.
      if (outbound && s.rid) out.outboundLayers[s.rid] = { ...d, rid: s.rid, active: s.active ?? null };
      const slot = outbound ? out.outbound : out.inbound;
      const count = (x) => (outbound ? x.packetsSent : x.packetsReceived) ?? 0;
      if (!slot[s.kind] || count(d) > count(slot[s.kind])) slot[s.kind] = d;
    }
  }
  return out;
}

/**
 * Logs the peer connection's and its DTLS transport's state changes into `events`. Returns an
 * object whose `dtls` follows the state of the DTLS transport in use; it keeps the last state
 * even after `close()` detaches the transport from the transceivers.
 */
export function watchStates(pc, events) {
  const status = { dtls: 'new' };
  pc.addEventListener('connectionstatechange', () => events.add(`connection ${pc.connectionState}`));
  pc.addEventListener('iceconnectionstatechange', () => events.add(`ice ${pc.iceConnectionState}`));
  // Only once the answer is in: before that every m-line has a transport of its own, and BUNDLE
  // then closes all but one, which must not read as the session's DTLS closing.
  let watched = null;
  pc.addEventListener('signalingstatechange', () => {
    const dtls = pc.getTransceivers()[0]?.sender.transport;
    if (pc.signalingState !== 'stable' || !dtls || dtls === watched) return;
    watched = dtls;
    status.dtls = dtls.state;
    dtls.addEventListener('statechange', () => {
      status.dtls = dtls.state;
      events.add(`dtls ${dtls.state}`);
    });
  });
  return status;
}
