// A WHIP/WHEP client (RFC 9725 and its WHEP counterpart): POST the offer, keep the session's
// Location and ETag, DELETE to leave. The server is ICE-lite with a host candidate in its answer,
// so the offer goes without waiting for ICE gathering and candidates are only sent with
// `trickle: true` (PATCH with application/trickle-ice-sdpfrag, RFC 8840, If-Match: the ETag).

/**
 * Negotiates `pc` with the WHIP/WHEP endpoint `url`. `session` is filled in as answers arrive:
 *   status, location (absolute), etag, answer (the SDP), patches: [{ status }], deleted.
 * `token`: the access token, sent as `Authorization: Bearer …` with the POST (a gateway's 307
 * carries it on to the node in the Location's query). Throws when the server does not answer 201.
 */
export async function negotiate(pc, url, session, { trickle = false, token = null } = {}) {
  const trickler = trickle ? new Trickler(pc, session) : null;

  const offer = await pc.createOffer();
  await pc.setLocalDescription(offer);
  const headers = { 'Content-Type': 'application/sdp' };
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(url, {
    method: 'POST',
    headers,
    body: pc.localDescription.sdp,
  });
  session.status = response.status;
  const body = await response.text();
  if (response.status !== 201) {
    session.body = body;
    throw new Error(`POST ${url} answered ${response.status}: ${body}`);
  }
  const location = response.headers.get('Location');
  if (!location) throw new Error(`POST ${url} answered 201 without a Location`);
  // Relative to where the POST ended up: a gateway may have redirected it to the node.
  session.location = new URL(location, response.url).href;
  session.etag = response.headers.get('ETag');
  session.answer = body;
  await pc.setRemoteDescription({ type: 'answer', sdp: body });
  trickler?.flush();
}

/** Ends the session with DELETE on its Location; `session.deleted` becomes the status. */
export async function deleteSession(session) {
  if (!session.location) throw new Error('no session to delete');
  const response = await fetch(session.location, { method: 'DELETE' });
  session.deleted = response.status;
}

/**
 * Sends candidates as they are gathered, once the session's Location is known; one PATCH at a
 * time, the last one with end-of-candidates. Outcomes go to `session.patches`.
 */
class Trickler {
  constructor(pc, session) {
    this.pc = pc;
    this.session = session;
    this.pending = [];
    this.gathered = false;
    this.ended = false;
    this.chain = Promise.resolve();
    pc.addEventListener('icecandidate', (e) => {
      if (e.candidate?.candidate) this.pending.push(e.candidate);
      else if (!e.candidate) this.gathered = true;
      this.flush();
    });
  }

  flush() {
    this.chain = this.chain.then(() => this.patch());
  }

  async patch() {
    const { session } = this;
    if (!session.location || this.ended) return;
    if (this.pending.length === 0 && !this.gathered) return;
    const batch = this.pending.splice(0);
    const end = this.gathered;
    const outcome = { candidates: batch.length, end };
    (session.patches ??= []).push(outcome);
    try {
      const response = await fetch(session.location, {
        method: 'PATCH',
        headers: {
          'Content-Type': 'application/trickle-ice-sdpfrag',
          'If-Match': session.etag ?? '*',
        },
        body: sdpFrag(this.pc, batch, end),
      });
      outcome.status = response.status;
      this.ended = end;
    } catch (e) {
      outcome.error = String(e);
    }
  }
}

/** An RFC 8840 fragment: our ufrag/pwd, then each candidate under its m-line's mid. */
function sdpFrag(pc, candidates, end) {
  const sdp = pc.localDescription.sdp;
  const ufrag = sdp.match(/^a=ice-ufrag:(.*)$/m)?.[1].trim();
  const pwd = sdp.match(/^a=ice-pwd:(.*)$/m)?.[1].trim();
  const lines = [`a=ice-ufrag:${ufrag}`, `a=ice-pwd:${pwd}`];
  const mids = [...new Set(pc.getTransceivers().map((t) => t.mid).filter((m) => m !== null))];
  // With BUNDLE every candidate belongs to the first m-line.
  const mid = mids[0] ?? '0';
  lines.push('m=audio 9 RTP/AVP 0', `a=mid:${mid}`);
  for (const c of candidates) lines.push(`a=${c.candidate}`);
  if (end) lines.push('a=end-of-candidates');
  return lines.join('\r\n') + '\r\n';
}

// The browser SDK's own codec preference and header-extension helpers (served beside this file).
export { negotiateDependencyDescriptor, preferVideoCodec } from './sdk-transport.js';
