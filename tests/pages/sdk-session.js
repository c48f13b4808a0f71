// What the SDK test pages share: loading the browser SDK from a Ferry server, logging a session's
// events, and measuring what the viewer sees across transports (the SDK swaps its
// RTCPeerConnection on a `reconnect`), so reports can be compared before and after migrations.

import { fail } from './report.js';
import { digest, watchStates } from './stats.js';

/** The browser SDK as the server serves it (`/sdk/ferry.js`, CORS open). */
export async function loadSdk(base) {
  return import(`${base}/sdk/ferry.js`);
}

/**
 * Follows `session`: its events (all of them, with the page time), the DTLS/ICE states of every
 * RTCPeerConnection it uses, and per-transport stats summed over the transports it went through
 * (freezes, lost packets, frames), so a swap of transport does not reset them.
 */
export class Watch {
  constructor(session, events) {
    this.session = session;
    this.events = events;
    this.log = [];
    this.pcs = new Map();
    // What happened before we listened (a refused ticket, retries while connecting).
    for (const e of session.history) {
      this.log.push({ t: Math.round(e.at), wall: Math.round(performance.timeOrigin + e.at), ...e });
    }
    for (const name of ['state', 'migrated', 'reconnecting', 'reconnected', 'degraded', 'relay-moved', 'dynacast', 'error']) {
      session.on(name, (e) => {
        this.log.push({ t: Math.round(performance.now()), wall: Date.now(), ...e });
        if (this.log.length > 200) this.log.shift();
        events.add(`${name} ${JSON.stringify(e)}`);
      });
    }
    this.track();
  }

  /** Starts watching the session's current RTCPeerConnection if it is new. */
  track() {
    const pc = this.session.pc;
    if (pc && !this.pcs.has(pc)) {
      this.pcs.set(pc, { status: watchStates(pc, this.events), last: null });
    }
    return pc;
  }

  /** The current transport's digest plus `totals` over every transport used. */
  async report() {
    const pc = this.track();
    let current = {};
    const totals = {
      freezeCount: 0, totalFreezesDuration: 0, packetsLost: 0, framesDecoded: 0, nackCount: 0,
      retransmittedPacketsReceived: 0, transports: this.pcs.size,
    };
    for (const [p, w] of this.pcs) {
      if (p.connectionState !== 'closed') {
        w.last = await digest(p).catch((e) => ({ statsError: String(e) }));
      }
      if (p === pc) {
        // Read live: a transport adopted mid-session was answered before we watched it.
        const dtls = p.getTransceivers()[0]?.sender.transport?.state ?? w.status.dtls;
        current = { ...w.last, dtlsState: dtls };
      }
      const v = w.last?.inbound?.video;
      if (v) {
        totals.freezeCount += v.freezeCount ?? 0;
        totals.totalFreezesDuration += v.totalFreezesDuration ?? 0;
        totals.packetsLost += v.packetsLost ?? 0;
        totals.framesDecoded += v.framesDecoded ?? 0;
        totals.nackCount += v.nackCount ?? 0;
        totals.retransmittedPacketsReceived += v.retransmittedPacketsReceived ?? 0;
      }
    }
    return {
      state: this.session.state,
      session: this.session.id,
      node: this.session.node,
      location: this.session.location,
      sdk: this.log,
      migrated: this.log.filter((e) => e.event === 'migrated'),
      reconnected: this.log.filter((e) => e.event === 'reconnected'),
      dynacast: this.log.filter((e) => e.event === 'dynacast'),
      sdkErrors: this.log.filter((e) => e.event === 'error'),
      quality: this.session.quality ?? null,
      videoPaused: this.session.videoPaused ?? null,
      totals,
      ...current,
    };
  }
}

/**
 * Every frame the <video> presents (requestVideoFrameCallback): the largest gap since the last
 * `reset()`, the wall-clock times of recent frames, and RTP timestamps going backwards.
 */
export class Frames {
  constructor(video) {
    this.video = video;
    this.count = 0;
    this.maxGapMs = 0;
    // Gaps over 80 ms since the last reset: { at: wall-clock ms (Date.now()'s scale) of the
    // frame that ended it, ms, captured, late (below) }, the last 100. Tests tell a migration's
    // gaps from the machine's by when they happened and by when their frames arrived.
    this.gaps = [];
    this.times = [];
    this.tsRegressions = 0;
    this.regressions = [];
    this.lastRtp = null;
    this.track = null;
    this.last = null;
    // The previous presented frame's arrival (meta.receiveTime, stamped when its last packet came
    // in) and RTP timestamp, to tell a gap in delivery from one in presentation.
    this.lastArrival = null;
    const tick = (now, meta) => {
      this.count += 1;
      const track = video.srcObject?.getVideoTracks?.()[0]?.id ?? null;
      const arrival =
        typeof meta.receiveTime === 'number' && typeof meta.rtpTimestamp === 'number'
          ? { rx: meta.receiveTime, rtp: meta.rtpTimestamp, track }
          : null;
      if (this.last !== null) {
        const gap = now - this.last;
        this.maxGapMs = Math.max(this.maxGapMs, gap);
        if (gap > 80) {
          // captured: how far apart the two frames were captured (RTP video clock, 90 kHz), and
          // late: how much longer than that they took to arrive. A frame a migration held back
          // arrives late. Frames captured one frame apart that arrived in time, shown late: the
          // renderer's stall (the machine's). Frames skipped in between may have come late or
          // been dropped by a starved renderer: the page cannot tell. null when it cannot tell at
          // all (no receive time, another track).
          const prev = this.lastArrival;
          const same = arrival && prev && prev.track === arrival.track;
          const captured = same ? ((arrival.rtp - prev.rtp) | 0) / 90 : null;
          const late = same ? Math.round(arrival.rx - prev.rx - captured) : null;
          this.gaps.push({
            at: Math.round(performance.timeOrigin + now),
            ms: Math.round(gap),
            captured: captured === null ? null : Math.round(captured),
            late,
          });
          if (this.gaps.length > 100) this.gaps.shift();
        }
      }
      this.last = now;
      this.lastArrival = arrival;
      this.times.push(Date.now());
      if (this.times.length > 400) this.times.shift();
      // A new track (the SDK swapped transports) is a new RTP stream: compare within one.
      if (track !== this.track) {
        this.track = track;
        this.lastRtp = null;
      }
      if (typeof meta.rtpTimestamp === 'number') {
        // 32-bit RTP timestamps: a step back (within a minute of 90 kHz ticks) is a regression.
        // A jump of more is another stream: the element can present a last frame of the old
        // track after the SDK swapped in the new one, and the two streams' bases are unrelated.
        if (this.lastRtp !== null) {
          const d = (meta.rtpTimestamp - this.lastRtp) | 0;
          if (d < 0 && d > -90000 * 60) {
            this.tsRegressions += 1;
            this.regressions.push({ t: Math.round(performance.now()), track, from: this.lastRtp, to: meta.rtpTimestamp });
            if (this.regressions.length > 10) this.regressions.shift();
          }
        }
        this.lastRtp = meta.rtpTimestamp;
      }
      video.requestVideoFrameCallback(tick);
    };
    video.requestVideoFrameCallback(tick);
  }

  reset() {
    this.maxGapMs = 0;
    this.gaps = [];
    this.last = null;
    this.lastArrival = null;
  }

  report() {
    return {
      count: this.count,
      maxGapMs: Math.round(this.maxGapMs),
      gaps: this.gaps,
      times: this.times,
      tsRegressions: this.tsRegressions,
      regressions: this.regressions,
      width: this.video.videoWidth,
    };
  }
}

/** Runs `f`, recording a failure instead of throwing. */
export async function attempt(what, f) {
  try {
    return await f();
  } catch (e) {
    fail(what, e);
    return null;
  }
}
