// One transport of a session: an RTCPeerConnection and its WHIP/WHEP exchanges (POST of the offer,
// ICE restart by PATCH), plus the getStats() readings the driver feeds to the machine. The server
// is ICE-lite with host candidates in its answers, so offers go without waiting for gathering.

/** A POST gets this long for an answer (then it counts as "no response", status 0). */
export const POST_TIMEOUT = 5000;
/** A PATCH (ICE restart) gets this long. */
export const PATCH_TIMEOUT = 1000;

/**
 * `fetch` with a timeout; `signals` (a Set) holds its AbortController while it runs so that
 * closing the owner aborts it. Rejects on network errors and timeouts.
 */
export async function fetchWithin(url, init, timeoutMs, signals = null) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
  signals?.add(ctl);
  try {
    const response = await fetch(url, { ...init, signal: ctl.signal });
    const body = await response.text();
    return { response, body };
  } finally {
    clearTimeout(timer);
    signals?.delete(ctl);
  }
}

/**
 * The `host:port` a TURN/STUN URI names (`turn:10.0.0.1:3478?transport=udp` → `10.0.0.1:3478`,
 * port 3478, or 5349 for `turns:`, when none is given), lower-cased; null when it is no such URI.
 */
export function relayAddress(uri) {
  const m = /^(turns?|stun):(\[[^\]]+\]|[^:?;]+)(?::(\d+))?/i.exec(String(uri ?? '').trim());
  if (!m) return null;
  const port = m[3] ?? (m[1].toLowerCase() === 'turns' ? '5349' : '3478');
  return `${m[2].toLowerCase()}:${port}`;
}

/**
 * The target of the first link in a `Link` header (RFC 8288; the browser joins several headers
 * with ", ") whose `rel` names `rel`, resolved against `base`; null when there is none. Quoted
 * parameters may hold commas (`events="migrate,ticket,end"`), so links are matched, not split.
 */
export function linkTarget(header, rel, base) {
  if (!header) return null;
  const link = /<([^>]*)>((?:\s*;\s*[^;,=\s]+(?:\s*=\s*(?:"[^"]*"|[^;,\s]*))?)*)/g;
  for (const m of String(header).matchAll(link)) {
    const r = /;\s*rel\s*=\s*(?:"([^"]*)"|([^;,\s]+))/i.exec(m[2]);
    const rels = (r?.[1] ?? r?.[2] ?? '').toLowerCase().split(/\s+/);
    if (!rels.includes(rel.toLowerCase())) continue;
    try {
      return new URL(m[1], base).href;
    } catch {
      return null;
    }
  }
  return null;
}

/** WHEP's video layer selection extension: where a viewer's caps go (`Link` rel). */
export const LAYER_REL = 'urn:ietf:params:whep:ext:core:layer';

/**
 * The simulcast encodings `publish({ simulcast: true })` sends: a quarter, half and full size
 * picture (rids q, h, f), with the bitrate caps an SFU's publisher commonly uses.
 */
export const SIMULCAST = Object.freeze([
  Object.freeze({ rid: 'q', scaleResolutionDownBy: 4, maxBitrate: 150_000 }),
  Object.freeze({ rid: 'h', scaleResolutionDownBy: 2, maxBitrate: 500_000 }),
  Object.freeze({ rid: 'f', scaleResolutionDownBy: 1, maxBitrate: 1_500_000 }),
]);

/**
 * The video encodings of a `simulcast` option: `true` → {@link SIMULCAST}, an array → copies of
 * its encodings (two or more, each with a distinct rid of 1–16 letters, digits, `-` or `_`),
 * `false`/absent → null (one encoding). Throws a TypeError on anything else.
 */
export function simulcastEncodings(option) {
  if (option == null || option === false) return null;
  const list = option === true ? SIMULCAST : option;
  if (!Array.isArray(list) || list.length < 2) {
    throw new TypeError('simulcast must be true or an array of two or more encodings');
  }
  const rids = new Set();
  for (const e of list) {
    const rid = e?.rid;
    if (typeof rid !== 'string' || !/^[A-Za-z0-9_-]{1,16}$/.test(rid) || rids.has(rid)) {
      throw new TypeError(`simulcast: every encoding needs a distinct rid ([A-Za-z0-9_-]{1,16}), not ${JSON.stringify(rid)}`);
    }
    rids.add(rid);
  }
  return list.map((e) => ({ ...e }));
}

/** A random prefix for idempotency keys (the SDK appends a counter). */
export function randomKeySeed() {
  // randomUUID needs a secure context; plain http to another host is not one.
  if (typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, '0')).join('');
}

/** What a failed request says: its message, or the abort reason. */
export const describe = (err) => String(err?.message ?? err);

/** The AV1 dependency descriptor header extension (what tells a receiver the layers of a frame). */
const DEPENDENCY_DESCRIPTOR = 'https://aomediacodec.github.io/av1-rtp-spec/#dependency-descriptor-rtp-header-extension';

/**
 * Offers the AV1 dependency descriptor on `transceiver` where the browser has it but does not
 * offer it by default (Chrome). Without it a receiver cannot put the spatial layers of an AV1
 * SVC picture together, and the node forwards such a viewer the base layer only.
 */
export function negotiateDependencyDescriptor(transceiver) {
  if (typeof transceiver.getHeaderExtensionsToNegotiate !== 'function') return;
  const direction = transceiver.direction;
  const exts = transceiver.getHeaderExtensionsToNegotiate();
  if (!exts.some((e) => e.uri === DEPENDENCY_DESCRIPTOR && e.direction === 'stopped')) return;
  transceiver.setHeaderExtensionsToNegotiate(
    exts.map((e) => (e.uri === DEPENDENCY_DESCRIPTOR ? { ...e, direction } : e)),
  );
}

/**
 * Puts `codec` ('vp8', 'h264', 'vp9' or 'av1') first in the video transceiver's preferences,
 * keeping the rest (RTX, RED, FEC and other codecs) after it. For H.264: packetization-mode=1
 * with profile-level-id 42e01f first, then other packetization-mode=1, then the rest; VP9
 * profile 0 before profile 2.
 * @param {RTCRtpTransceiver} transceiver
 * @param {'vp8'|'h264'|'vp9'|'av1'} codec
 */
export function preferVideoCodec(transceiver, codec) {
  const mime = videoMime(codec);
  const codecs = RTCRtpSender.getCapabilities('video')?.codecs ?? [];
  const rank = (c) => {
    if (c.mimeType.toLowerCase() !== mime) return 3;
    const fmtp = c.sdpFmtpLine ?? '';
    const mode1 = /packetization-mode=1/.test(fmtp);
    if (mime === 'video/h264' && mode1 && /profile-level-id=42e01f/i.test(fmtp)) return 0;
    // VP9 profile 0 before profile 2 (10-bit): what every viewer decodes.
    if (mime === 'video/vp9') return /profile-id=2/.test(fmtp) ? 2 : 1;
    return mode1 || mime !== 'video/h264' ? 1 : 2;
  };
  const ordered = codecs.map((c, i) => [rank(c), i, c]).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  if (!ordered.length || ordered[0][0] === 3) throw new Error(`this browser cannot send ${mime}`);
  transceiver.setCodecPreferences(ordered.map(([, , c]) => c));
}

/** The MIME type of a codec option; throws on an unknown one. */
export function videoMime(codec) {
  const mime = { vp8: 'video/vp8', h264: 'video/h264', vp9: 'video/vp9', av1: 'video/av1' }[
    String(codec).toLowerCase()
  ];
  if (!mime) throw new Error(`unknown codec ${codec} (use vp8, h264, vp9 or av1)`);
  return mime;
}

/** An RFC 8840 fragment with our ICE credentials (an ICE restart offers no candidates). */
export function sdpFrag(localSdp, mid) {
  const ufrag = localSdp.match(/^a=ice-ufrag:(.*)$/m)?.[1].trim();
  const pwd = localSdp.match(/^a=ice-pwd:(.*)$/m)?.[1].trim();
  return [`a=ice-ufrag:${ufrag}`, `a=ice-pwd:${pwd}`, 'm=audio 9 RTP/AVP 0', `a=mid:${mid}`, ''].join('\r\n');
}

/** `address:port` of each `a=candidate` line of an SDP or fragment. */
export function candidateAddresses(sdp) {
  return [...sdp.matchAll(/^a=candidate:\S+ \d+ \S+ \d+ (\S+) (\d+) /gm)].map((c) => `${c[1]}:${c[2]}`);
}

/**
 * The remote description after an ICE restart: the answer fragment's credentials replace the
 * old ones, its candidates replace the old candidates (in every m-section, after `a=ice-pwd`).
 * Returns null when the fragment has no credentials.
 */
export function applyRestartFrag(answerSdp, frag) {
  const ufrag = frag.match(/^a=ice-ufrag:(.*)$/m)?.[1].trim();
  const pwd = frag.match(/^a=ice-pwd:(.*)$/m)?.[1].trim();
  if (!ufrag || !pwd) return null;
  const candidates = [...frag.matchAll(/^a=(candidate:.*)$/gm)].map((c) => `a=${c[1].trim()}\r\n`);
  return answerSdp
    .replace(/^a=candidate:.*\r?\n/gm, '')
    .replace(/^a=ice-ufrag:.*\r?\n/gm, `a=ice-ufrag:${ufrag}\r\n`)
    .replace(/^a=ice-pwd:.*\r?\n/gm, `a=ice-pwd:${pwd}\r\n${candidates.join('')}`);
}

/** The selected candidate pair of a stats report (Chrome: via the transport; else `selected`). */
export function selectedPair(stats) {
  for (const s of stats.values()) {
    if (s.type === 'transport' && s.selectedCandidatePairId) return stats.get(s.selectedCandidatePairId) ?? null;
  }
  for (const s of stats.values()) if (s.type === 'candidate-pair' && s.selected) return s;
  return null;
}

/** The last path segment of a URL (a session's id in its Location). */
const lastSegment = (url) => new URL(url).pathname.split('/').filter(Boolean).pop() ?? '';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * An RTCPeerConnection set up for a publisher (the media stream's tracks, `sendonly`) or a player
 * (`recvonly` audio and video), with the offer it POSTs (the same on every retry).
 */
export class Transport {
  /**
   * @param {number} id the machine's transport number
   * @param {'publish'|'play'} kind
   * @param {{ mediaStream?: MediaStream, codec?: string, encodings?: RTCRtpEncodingParameters[]|null,
   *   iceServers?: RTCIceServer[], relayOnly?: boolean, onConnected: () => void,
   *   onIceLost: () => void }} opts `encodings`: the video track's simulcast encodings (publish)
   */
  constructor(id, kind, { mediaStream, codec, encodings, iceServers, relayOnly, onConnected, onIceLost }) {
    this.id = id;
    this.kind = kind;
    this.closed = false;
    this.connected = false;
    /** The remote description (kept to rewrite it on ICE restarts). */
    this.answer = null;
    /** Requests in flight, aborted by close(). */
    this.requests = new Set();
    /** Signalling steps run one at a time. */
    this.chain = Promise.resolve();
    /** So do changes of the video sender's parameters (each reads them, then sets them). */
    this.paramsChain = Promise.resolve();
    /** Frames decoded so far (play), as last fed to the machine. */
    this.frames = 0;
    this.polling = false;
    this.pc = new RTCPeerConnection({
      iceServers: iceServers ?? [],
      iceTransportPolicy: relayOnly ? 'relay' : 'all',
      bundlePolicy: 'max-bundle',
    });
    this.pc.addEventListener('connectionstatechange', () => {
      if (this.closed || this.connected || this.pc.connectionState !== 'connected') return;
      this.connected = true;
      onConnected();
    });
    this.pc.addEventListener('iceconnectionstatechange', () => {
      const s = this.pc.iceConnectionState;
      if (!this.closed && (s === 'disconnected' || s === 'failed')) onIceLost();
    });
    try {
      if (kind === 'publish') {
        for (const track of mediaStream.getTracks()) {
          const init = { direction: 'sendonly', streams: [mediaStream] };
          if (track.kind === 'video' && encodings?.length) init.sendEncodings = encodings.map((e) => ({ ...e }));
          const t = this.pc.addTransceiver(track, init);
          if (track.kind === 'video' && codec) preferVideoCodec(t, codec);
          // AV1 needs it for its layers; for every codec it frames the stream for the node
          // (which renumbers its frames per viewer across layer switches and new encoders).
          if (track.kind === 'video') negotiateDependencyDescriptor(t);
        }
      } else {
        this.pc.addTransceiver('audio', { direction: 'recvonly' });
        negotiateDependencyDescriptor(this.pc.addTransceiver('video', { direction: 'recvonly' }));
      }
    } catch (err) {
      this.close();
      throw err;
    }
    this.offer = this.pc.createOffer().then(async (offer) => {
      await this.pc.setLocalDescription(offer);
      return this.pc.localDescription.sdp;
    });
    // A failure is reported by post(); this copy must not be an unhandled rejection.
    this.offer.catch(() => {});
  }

  /** The video transceiver. */
  video() {
    return this.pc.getTransceivers().find((t) => t.receiver.track?.kind === 'video') ?? null;
  }

  /**
   * POSTs this transport's offer to `url`. Resolves with `{ status: 201, location, session, node,
   * ticket, layer }` once the answer is applied (`layer`: the viewer's caps URL from the answer's
   * `Link`, null without one), else `{ status, reason }` (status 0: no response).
   */
  async post(url, headers) {
    let sdp;
    try {
      sdp = await this.offer;
    } catch (err) {
      // Not the server's fault, and trying again would not help: a non-retryable status.
      return { status: 400, reason: `could not make an offer: ${describe(err)}` };
    }
    let response;
    let body;
    try {
      ({ response, body } = await fetchWithin(url, { method: 'POST', headers, body: sdp }, POST_TIMEOUT, this.requests));
    } catch (err) {
      return { status: 0, reason: describe(err) };
    }
    if (response.status !== 201) return { status: response.status, reason: body };
    const header = response.headers.get('Location');
    if (!header) return { status: 201, reason: 'answered 201 without a Location' };
    // Relative to where the POST ended up: the gateway redirected it to a node.
    let location;
    try {
      location = new URL(header, response.url || url).href;
    } catch {
      return { status: 201, reason: `answered 201 with a bad Location: ${header}` };
    }
    if (this.closed) return { status: 0, reason: 'transport closed' };
    try {
      await this.pc.setRemoteDescription({ type: 'answer', sdp: body });
    } catch (err) {
      return { status: 201, reason: `answer not applicable: ${describe(err)}` };
    }
    this.answer = body;
    return {
      status: 201,
      location,
      session: response.headers.get('Ferry-Session') ?? lastSegment(location),
      node: response.headers.get('Ferry-Node'),
      ticket: response.headers.get('Ferry-Ticket'),
      layer: linkTarget(response.headers.get('Link'), LAYER_REL, location),
    };
  }

  /**
   * ICE restart: new credentials PATCHed to `location`, the answer fragment applied. Resolves
   * with `{ status: 200, candidates, before }` (the answer's candidates as `address:port`, and
   * the selected pair before the restart) or `{ status, reason }`.
   */
  restartIce(location, headers) {
    const run = this.chain.then(() => this.runRestart(location, headers));
    this.chain = run.catch(() => {});
    return run;
  }

  async runRestart(location, headers) {
    if (this.closed) return { status: 0, reason: 'transport closed' };
    const { pc } = this;
    const before = await this.pathMark();
    let local;
    try {
      pc.restartIce();
      await pc.setLocalDescription(await pc.createOffer({ iceRestart: true }));
      local = pc.localDescription.sdp;
    } catch (err) {
      return { status: 0, reason: `could not make an ICE restart offer: ${describe(err)}` };
    }
    const mid = pc.getTransceivers().find((t) => t.mid !== null)?.mid ?? '0';
    let response;
    let frag;
    try {
      ({ response, body: frag } = await fetchWithin(
        location,
        {
          method: 'PATCH',
          headers: { ...headers, 'Content-Type': 'application/trickle-ice-sdpfrag', 'If-Match': '*' },
          body: sdpFrag(local, mid),
        },
        PATCH_TIMEOUT,
        this.requests,
      ));
    } catch (err) {
      await this.rollback();
      return { status: 0, reason: describe(err) };
    }
    if (response.status !== 200) {
      await this.rollback();
      return { status: response.status, reason: frag };
    }
    const sdp = this.answer && applyRestartFrag(this.answer, frag);
    if (!sdp) {
      await this.rollback();
      return { status: response.status, reason: `no ICE credentials in the answer: ${frag}` };
    }
    try {
      await pc.setRemoteDescription({ type: 'answer', sdp });
    } catch (err) {
      await this.rollback();
      return { status: response.status, reason: `restart answer not applicable: ${describe(err)}` };
    }
    this.answer = sdp;
    return { status: 200, candidates: candidateAddresses(frag), before };
  }

  /** Back to the last stable description after a failed restart (the old path may still work). */
  async rollback() {
    if (this.closed || this.pc.signalingState !== 'have-local-offer') return;
    await this.pc.setLocalDescription({ type: 'rollback' }).catch(() => {});
  }

  /** The selected pair now: its id and how many checks it got answered. */
  async pathMark() {
    try {
      const pair = selectedPair(await this.pc.getStats());
      return { id: pair?.id ?? null, responses: pair?.responsesReceived ?? 0 };
    } catch {
      return { id: null, responses: 0 };
    }
  }

  /**
   * Resolves true once ICE works on the path a restart asked for: the selected pair has
   * succeeded, its remote candidate is one of `candidates` (any, if none were given) and it is
   * a new pair or got a check answered since `before`. Polls every 20 ms, gives up after `maxMs`.
   */
  async waitForPath(candidates, before, maxMs = 2000) {
    const wanted = new Set(candidates);
    const until = performance.now() + maxMs;
    while (!this.closed && performance.now() < until) {
      try {
        const stats = await this.pc.getStats();
        const pair = selectedPair(stats);
        const remote = pair && stats.get(pair.remoteCandidateId);
        const at = remote && `${remote.address ?? remote.ip}:${remote.port}`;
        const fresh = pair && (pair.id !== before.id || (pair.responsesReceived ?? 0) > before.responses);
        const local = pair && stats.get(pair.localCandidateId);
        this.lastPath = pair
          ? `${pair.id} ${pair.state} ${local?.candidateType ?? '?'} ${local?.url ?? ''} -> ${at}, ${pair.responsesReceived ?? 0} responses (before: ${before.id}, ${before.responses})`
          : 'no selected pair';
        if (pair?.state === 'succeeded' && fresh && (wanted.size === 0 || wanted.has(at))) return true;
      } catch {
        // A closed connection: the loop ends.
      }
      await sleep(20);
    }
    return false;
  }

  /**
   * Whether this transport may use one of the relays at `addresses` (`host:port`, see
   * `relayAddress`): they are among its ICE servers, or its selected local candidate came from one.
   */
  async usesRelay(addresses) {
    const wanted = new Set(addresses);
    const configured = (this.pc.getConfiguration().iceServers ?? []).flatMap((s) => [].concat(s.urls ?? []));
    if (configured.some((u) => wanted.has(relayAddress(u)))) return true;
    const local = await this.selectedRelay().catch(() => null);
    return local?.url != null && wanted.has(relayAddress(local.url));
  }

  /** Replaces the ICE servers (used from the next ICE restart on). */
  setIceServers(iceServers) {
    this.pc.setConfiguration({ ...this.pc.getConfiguration(), iceServers });
  }

  /**
   * The selected pair's local candidate when it is a relay one: `{ url, address }` (the TURN
   * server's URI as the browser reports it, and the relayed address); null otherwise.
   */
  async selectedRelay() {
    const stats = await this.pc.getStats();
    const pair = selectedPair(stats);
    const local = pair && stats.get(pair.localCandidateId);
    if (!local || local.candidateType !== 'relay') return null;
    return { url: local.url ?? null, address: `${local.address ?? local.ip}:${local.port}` };
  }

  /** Frames the video receiver decoded so far (play). */
  async framesDecoded() {
    const video = this.video();
    if (!video) return 0;
    const stats = await video.receiver.getStats();
    for (const s of stats.values()) {
      if (s.type === 'inbound-rtp' && (s.kind ?? s.mediaType) === 'video') return s.framesDecoded ?? 0;
    }
    return 0;
  }

  /**
   * Cumulative counters for throughput and the digest: bytes and packets in and out, packets
   * lost (play: inbound; publish: as the server reports), the largest loss fraction the server
   * reports, the sender's bandwidth estimate, and the video stream's codec and frame counts.
   */
  async sample() {
    const stats = await this.pc.getStats();
    const out = {
      at: performance.now(),
      bytes: 0,
      packets: 0,
      lost: 0,
      fractionLost: 0,
      availableOutgoingBitrate: selectedPair(stats)?.availableOutgoingBitrate ?? null,
      codec: null,
      framesDecoded: null,
      framesSent: null,
      freezeCount: null,
    };
    const inbound = this.kind === 'play';
    for (const s of stats.values()) {
      const kind = s.kind ?? s.mediaType;
      if (s.type === (inbound ? 'inbound-rtp' : 'outbound-rtp')) {
        out.bytes += (inbound ? s.bytesReceived : s.bytesSent) ?? 0;
        out.packets += (inbound ? s.packetsReceived : s.packetsSent) ?? 0;
        if (inbound) out.lost += s.packetsLost ?? 0;
        if (kind === 'video') {
          out.codec = stats.get(s.codecId)?.mimeType ?? out.codec;
          if (inbound) {
            out.framesDecoded = s.framesDecoded ?? null;
            out.freezeCount = s.freezeCount ?? null;
          } else {
            out.framesSent = s.framesSent ?? null;
          }
        }
      } else if (!inbound && s.type === 'remote-inbound-rtp') {
        out.lost += s.packetsLost ?? 0;
        out.fractionLost = Math.max(out.fractionLost, s.fractionLost ?? 0);
      }
    }
    return out;
  }

  /**
   * Publish: which encodings of the video sender the browser sends. None while `enabled` is
   * false (degraded); else each one but those `inactive` (a Map rid → false: dynacast, what no
   * viewer of the node can use) names. Changes run one after another, each on the parameters as
   * the one before left them; what is asked last wins.
   * @param {boolean} enabled
   * @param {Map<string, boolean>} [active]
   */
  setEncodings(enabled, active = new Map()) {
    const run = this.paramsChain.then(() => this.applyEncodings(enabled, active));
    this.paramsChain = run.catch(() => {});
    return run;
  }

  async applyEncodings(enabled, active) {
    const video = this.video();
    if (!video || this.closed) return;
    const params = video.sender.getParameters();
    if (!params.encodings?.length) return;
    let changed = false;
    for (const e of params.encodings) {
      const want = enabled && (e.rid == null || active.get(e.rid) !== false);
      if (e.active !== want) {
        e.active = want;
        changed = true;
      }
    }
    if (changed) await video.sender.setParameters(params);
  }

  /** Receiver tracks (play), audio then video. */
  tracks() {
    return this.pc.getTransceivers().map((t) => t.receiver.track).filter(Boolean);
  }

  /** Aborts its requests and closes the connection. */
  close() {
    if (this.closed) return;
    this.closed = true;
    for (const ctl of this.requests) ctl.abort(new Error('transport closed'));
    this.pc.close();
  }
}
