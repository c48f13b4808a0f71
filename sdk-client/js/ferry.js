// Ferry's browser SDK: publish or play a stream; the session follows migrations, recovers from a
// dead node, retries with backoff and turns video off when the network cannot carry it. The
// decisions are the shared state machine's (fsm.js); this module is its driver: inputs in at
// performance.now(), commands carried out, one timer at pollTimeout(). See docs/sdk.md.

import { Machine } from './fsm.js';
import { Subscription, probeNode } from './events.js';
import { joinRoom } from './room.js';
import {
  POST_TIMEOUT,
  Transport,
  describe,
  fetchWithin,
  randomKeySeed,
  relayAddress,
  simulcastEncodings,
  videoMime,
} from './transport.js';

/** The state machine and its defaults, for apps and tests that drive it themselves. */
export { DEFAULT_CONFIG, Machine } from './fsm.js';
/** A joined room ({@link FerryClient#join}). */
export { Room } from './room.js';
/** The encodings `publish(…, { simulcast: true })` sends. */
export { SIMULCAST } from './transport.js';

/** Events kept in a session's `history`. */
const HISTORY = 200;
/** Frames decoded are sampled this often (play). */
const FRAME_POLL = 20;
/** Throughput and the `stats` event, this often. */
const TICK = 1000;
/** A player with no new frame this long probes its node. */
const STALL_AFTER = 1000;
/** A restarted path must work within this. */
const PATH_WAIT = 2000;
/** A move off a draining relay gets this long for its new path (a TURN allocation first). */
const RELAY_MOVE_WAIT = 5000;
/** Longest wait before following the events again after the stream dropped (node alive). */
const RESUBSCRIBE_CAP = 5000;

/** Locations a player remembers having sent its caps to (a few moves' worth). */
const QUALITY_SENT = 8;

/** Ticket keys a session of this page holds: a second session of the same stream must not
 *  resume (and so take over) the first one's identity. */
const heldKeys = new Set();

function report(err) {
  if (typeof globalThis.reportError === 'function') globalThis.reportError(err);
  else console.error(err);
}

function storage() {
  try {
    return globalThis.sessionStorage ?? null;
  } catch {
    return null;
  }
}

/**
 * The entry point: publishes and plays streams of one Ferry cluster.
 */
export class FerryClient {
  #token;

  /**
   * @param {{ baseUrl: string, token?: string }} options `baseUrl`: the gateway (scheduler or any
   *   node), e.g. `http://127.0.0.1:8080`; `token`: sent as `Authorization: Bearer …`
   */
  constructor({ baseUrl, token } = {}) {
    if (!baseUrl) throw new TypeError('FerryClient: baseUrl is required');
    /** The gateway's URL, without a trailing slash. */
    this.baseUrl = new URL(String(baseUrl), globalThis.location?.href).href.replace(/\/+$/, '');
    this.#token = token ?? null;
  }

  /**
   * Publishes `mediaStream` as `stream` (WHIP). Resolves once the session is first connected;
   * rejects with the reason if it fails or closes before.
   * @param {string} stream
   * @param {MediaStream} mediaStream
   * @param {{ codec?: 'vp8'|'h264', simulcast?: boolean|RTCRtpEncodingParameters[], resume?: boolean, config?: object, iceServers?: RTCIceServer[], endpoint?: string, turn?: boolean, relayOnly?: boolean, user?: string }} [opts]
   *   `simulcast`: send the video in several encodings (`true`: {@link SIMULCAST}, or your own,
   *   each with a rid); the node forwards each viewer the one its link and caps allow, and tells
   *   the SDK which ones no viewer can use (dynacast) so that the browser stops encoding them
   * @returns {Promise<object>} the session
   */
  publish(stream, mediaStream, opts = {}) {
    try {
      checkName(stream);
      if (typeof mediaStream?.getTracks !== 'function' || mediaStream.getTracks().length === 0) {
        throw new TypeError('publish: mediaStream must be a MediaStream with tracks');
      }
      if (opts.codec != null) videoMime(opts.codec);
      const encodings = simulcastEncodings(opts.simulcast);
      return new Driver(this.#settings(), 'publish', stream, { ...opts, mediaStream, encodings }).start();
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * Plays `stream` (WHEP). Resolves once the session is first connected; rejects with the reason
   * if it fails or closes before.
   * @param {string} stream
   * @param {{ video?: HTMLVideoElement, quality?: object, resume?: boolean, config?: object, iceServers?: RTCIceServer[], endpoint?: string, turn?: boolean, relayOnly?: boolean, user?: string }} [opts]
   *   `quality`: caps from the start, as {@link Session#setQuality} (sent with the first answer)
   * @returns {Promise<object>} the session
   */
  play(stream, opts = {}) {
    try {
      checkName(stream);
      const quality = opts.quality === undefined ? null : normalizeQuality(opts.quality);
      return new Driver(this.#settings(), 'play', stream, { ...opts, quality }).start();
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * Joins `room` (docs/rooms.md): asks the gateway where to connect, opens the WebSocket to that
   * node and enters. Resolves once the node acknowledged the join; rejects with an `Error` whose
   * `code` is the node's (`bad_request`, …), `join-refused` (with `status`), `timeout` (10 s) or
   * `closed`.
   * @param {string} room the room id (`[A-Za-z0-9._-]{1,64}`)
   * @param {{ name?: string, participant?: string, metadata?: string, WebSocket?: Function, fetch?: Function }} [opts]
   *   `participant`: the id to join as (default: the gateway makes one); `name`: shown to the
   *   others (default: the id); `WebSocket`/`fetch`: for runtimes without them (tests, Node)
   * @returns {Promise<import('./room.js').Room>}
   */
  join(room, opts = {}) {
    return joinRoom(this, this.#settings(), room, opts);
  }

  #settings() {
    return {
      baseUrl: this.baseUrl,
      token: this.#token,
      auth: this.#token ? { Authorization: `Bearer ${this.#token}` } : {},
    };
  }
}

function checkName(stream) {
  if (typeof stream !== 'string' || stream === '') throw new TypeError('the stream name must be a non-empty string');
}

/** The caps a player may ask for, with the node's ranges (`sfu/src/adapt/prefs.rs`). */
const QUALITY_FIELDS = {
  maxHeight: [1, 16_384],
  maxWidth: [1, 16_384],
  maxFps: [1, 240],
  maxBitrate: [10_000, 1_000_000_000],
};

/**
 * A player's caps as the node takes them (`POST {session}/layer`): the fields given (absent,
 * null and undefined ones left out); `null`/`undefined` is `{}`, automatic. Throws a TypeError
 * (unknown field, not an integer) or RangeError (outside the node's range) otherwise.
 * @param {object|null|undefined} caps
 * @returns {{ maxHeight?: number, maxWidth?: number, maxFps?: number, maxBitrate?: number }}
 */
export function normalizeQuality(caps) {
  if (caps == null) return {};
  if (typeof caps !== 'object' || Array.isArray(caps)) throw new TypeError('setQuality takes an object or null');
  const out = {};
  for (const [key, value] of Object.entries(caps)) {
    const range = QUALITY_FIELDS[key];
    if (!range) throw new TypeError(`setQuality: unknown field ${key} (use ${Object.keys(QUALITY_FIELDS).join(', ')})`);
    if (value == null) continue;
    if (!Number.isSafeInteger(value)) throw new TypeError(`setQuality: ${key} must be an integer, not ${value}`);
    if (value < range[0] || value > range[1]) throw new RangeError(`setQuality: ${key} must be ${range[0]}..${range[1]}`);
    out[key] = value;
  }
  return out;
}

/**
 * A published or played stream, kept alive by the SDK. Made by {@link FerryClient}.
 */
class Session {
  #d;

  constructor(driver) {
    this.#d = driver;
  }

  /** @returns {string|null} the session id (`Ferry-Session`) */
  get id() {
    return this.#d.machine.session;
  }

  /** @returns {string} the machine's state */
  get state() {
    return this.#d.machine.state;
  }

  /** @returns {RTCPeerConnection|null} the connection media flows on */
  get pc() {
    return this.#d.current?.pc ?? null;
  }

  /** @returns {MediaStream} play: one stable stream (tracks swap with the transport); publish: the one published */
  get stream() {
    return this.#d.stream;
  }

  /** @returns {string|null} the node serving the session */
  get node() {
    return this.#d.machine.node;
  }

  /** @returns {string|null} the session's URL on that node */
  get location() {
    return this.#d.machine.location;
  }

  /**
   * @returns {object[]} the session's events so far (not `stats`), oldest first, the last 200 —
   * including those from before `publish()`/`play()` resolved (a refused ticket, retries).
   */
  get history() {
    return [...this.#d.history];
  }

  /**
   * Listens to `state`, `migrated`, `reconnecting`, `reconnected`, `degraded`, `stats`, `error`,
   * `relay-moved`, and (publish, simulcast) `dynacast`.
   * @param {string} event
   * @param {(payload: object) => void} fn
   * @returns {this}
   */
  on(event, fn) {
    const set = this.#d.listeners.get(event) ?? new Set();
    set.add(fn);
    this.#d.listeners.set(event, set);
    return this;
  }

  /**
   * Stops listening.
   * @param {string} event
   * @param {(payload: object) => void} fn
   * @returns {this}
   */
  off(event, fn) {
    this.#d.listeners.get(event)?.delete(fn);
    return this;
  }

  /**
   * Play: caps what the node sends this viewer, whatever its link carries — `maxHeight`,
   * `maxWidth` (pixels: the highest simulcast layer within them, the lowest if none is),
   * `maxFps`, `maxBitrate` (bit/s); `{}` or `null` leaves it to the node's estimate again. The
   * caps stay with the session: the SDK sends them again to the node serving it after every
   * move or recovery. Resolves once the node took them (204); rejects with an Error (`status`:
   * the HTTP status, 0 without an answer) if it did not — they are kept and sent again after
   * the next move — or at once on a bad value (TypeError, RangeError) or a publisher.
   * @param {{ maxHeight?: number, maxWidth?: number, maxFps?: number, maxBitrate?: number }|null} caps
   * @returns {Promise<void>}
   */
  setQuality(caps) {
    try {
      this.#d.onlyPlay('setQuality');
      return this.#d.setQuality(normalizeQuality(caps));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** @returns {object|null} play: the caps asked for last (`{}`: automatic), null if never */
  get quality() {
    const q = this.#d.quality;
    return q === null ? null : { ...q };
  }

  /**
   * Play: the node stops forwarding video to this viewer (audio goes on) until
   * {@link Session#resumeVideo}; kept across moves and recoveries. Resolves once the node
   * answered; rejects as {@link Session#setQuality} does.
   * @returns {Promise<void>}
   */
  pauseVideo() {
    return this.#setPaused(true);
  }

  /**
   * Play: video again after {@link Session#pauseVideo} (from the next keyframe; while the
   * network keeps the session degraded, once it recovers).
   * @returns {Promise<void>}
   */
  resumeVideo() {
    return this.#setPaused(false);
  }

  /** @returns {boolean} play: whether the app paused video */
  get videoPaused() {
    return this.#d.appPaused;
  }

  #setPaused(paused) {
    try {
      this.#d.onlyPlay(paused ? 'pauseVideo' : 'resumeVideo');
      return this.#d.setAppPaused(paused);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** @returns {Promise<object>} a digest of the session and its media now */
  stats() {
    return this.#d.stats();
  }

  /**
   * Ends the session (DELETE) and forgets its ticket.
   * @returns {Promise<void>} settles once the DELETE was answered (or failed)
   */
  close() {
    this.#d.feed({ type: 'close' });
    // Called from a listener, the DELETE runs once the command loop it interrupted goes on.
    return Promise.resolve().then(() => this.#d.deleting);
  }
}

/** Carries out one session's machine: the driver. */
class Driver {
  constructor(settings, kind, name, opts) {
    this.settings = settings;
    this.kind = kind;
    this.name = name;
    this.opts = opts;
    const seed = crypto.getRandomValues(new Uint32Array(1))[0];
    this.machine = new Machine(kind, opts.config ?? {}, seed, randomKeySeed());
    this.session = new Session(this);
    this.listeners = new Map();
    this.history = [];
    /** @type {Map<number, Transport>} */
    this.transports = new Map();
    this.current = null;
    this.subscription = null;
    this.eventErrors = 0;
    this.timer = null;
    this.resubscribeTimer = null;
    this.frameTimer = null;
    this.tickTimer = null;
    this.pumping = false;
    this.ended = false;
    this.settled = false;
    /** Video on as far as the machine is concerned (off while degraded). */
    this.videoEnabled = true;
    /** Play: the app paused video (`pauseVideo`). */
    this.appPaused = false;
    /**
     * Play, paused by the app: video is asked for while an ICE restart waits for its first
     * frame (the machine takes a restart as done at a frame, and the session carries its
     * pause to the node it moves to).
     */
    this.holdVideo = false;
    /** Play: what the node serving the session was last told about video (`{ location, enabled }`). */
    this.videoSent = null;
    /** Play: the caps (`setQuality`), null until the app set any. */
    this.quality = opts.quality ?? null;
    /** Play: session URLs that have the current caps (a new one must hear them). */
    this.qualitySentTo = new Set();
    /** Caps POSTs run one at a time, each with the caps of its time. */
    this.qualityChain = Promise.resolve();
    /** Play: each session URL's caps URL, from its answer's `Link` (else `{location}/layer`). */
    this.layerUrls = new Map();
    /** Publish: dynacast, rid → whether the node says some consumer can use that encoding. */
    this.dynacast = new Map();
    /** The transport and session URL that dynacast state is about. */
    this.dynacastKey = null;
    this.lastMigrated = null;
    this.migrations = 0;
    this.reconnects = 0;
    this.bitrate = null;
    this.previous = null;
    this.lastFrameAt = 0;
    this.framesFlowed = false;
    this.probing = false;
    this.lastProbe = -Infinity;
    this.deleting = Promise.resolve();
    /** The gateway's relays (`{ servers, until }`), the one in use (index) and a move under way. */
    this.relayCache = null;
    this.relayTurn = 0;
    this.relayMove = false;
    this.ticketKey = `ferry:ticket:${kind}:${name}`;
    this.holdsKey = !heldKeys.has(this.ticketKey);
    if (this.holdsKey) heldKeys.add(this.ticketKey);
    this.stream = kind === 'play' ? new MediaStream() : opts.mediaStream;
    this.video = kind === 'play' ? (opts.video ?? null) : null;
    if (this.video) this.video.srcObject = this.stream;
    this.ready = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }

  start() {
    let ticket = null;
    if (this.opts.resume !== false && this.holdsKey) {
      try {
        ticket = storage()?.getItem(this.ticketKey) ?? null;
      } catch {
        ticket = null;
      }
    }
    if (this.kind === 'play') this.frameTimer = setInterval(() => this.pollFrames(), FRAME_POLL);
    this.tickTimer = setInterval(() => this.tick().catch(report), TICK);
    this.feed({ type: 'start', ticket });
    return this.ready;
  }

  /** One input into the machine, at the time it happened; then its commands. */
  feed(input) {
    try {
      this.machine.handleInput(performance.now(), input);
    } catch (err) {
      report(err);
    }
    this.pump();
  }

  pump() {
    // A command that feeds an input (a listener that closes the session) lands here: the outer
    // loop drains what that input added, in order.
    if (this.pumping) return;
    this.pumping = true;
    try {
      for (let c = this.machine.pollCommand(); c; c = this.machine.pollCommand()) {
        try {
          this.execute(c);
        } catch (err) {
          report(err);
        }
      }
      if (this.kind === 'play' && !this.ended) {
        this.syncVideo()?.catch((err) => this.fail('set-video-failed', err.status, err.message));
        const location = this.machine.location;
        if (this.quality !== null && location != null) this.resendQuality(location);
      }
    } finally {
      this.pumping = false;
    }
    this.arm();
  }

  arm() {
    clearTimeout(this.timer);
    this.timer = null;
    const at = this.machine.pollTimeout();
    if (at == null) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.machine.handleTimeout(performance.now());
      this.pump();
    }, Math.max(0, Math.ceil(at - performance.now())));
  }

  execute(c) {
    switch (c.type) {
      case 'post':
        return void this.post(c).catch(report);
      case 'restart-ice':
        return void this.restart(c).catch(report);
      case 'adopt':
        return this.adopt(c.transport);
      case 'close-transport':
        return this.closeTransport(c.transport);
      case 'subscribe':
        return this.subscribe(c.location);
      case 'delete':
        return this.delete(c.location);
      case 'set-video':
        return this.setVideo(c.enabled);
      case 'store-ticket':
        return this.storeTicket(c.ticket);
      case 'emit':
        return this.dispatch(c);
      default:
        throw new Error(`unknown command ${c.type}`);
    }
  }

  endpoint() {
    return `${this.settings.baseUrl}/${this.kind === 'publish' ? 'whip' : 'whep'}/${encodeURIComponent(this.name)}`;
  }

  /**
   * The gateway's TURN relays for this user and stream (`POST /v1/turn/credentials`): a primary
   * and its backups with one credential, fetched again once half its lifetime is over.
   * @returns {Promise<RTCIceServer[]>}
   */
  async relays() {
    if (this.relayCache && performance.now() < this.relayCache.until) return this.relayCache.servers;
    this.user ??= this.opts.user ?? `u-${Math.random().toString(36).slice(2, 12)}`;
    const { response, body: text } = await fetchWithin(
      `${this.settings.baseUrl}/v1/turn/credentials`,
      {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', ...this.settings.auth },
        body: JSON.stringify({ user: this.user, stream: this.name }),
      },
      POST_TIMEOUT,
    );
    if (!response.ok) throw new Error(`TURN relays: ${response.status} ${text}`.trim());
    const body = JSON.parse(text);
    const servers = body.ice_servers.map((s) => ({ urls: s.urls, username: s.username, credential: s.credential }));
    this.relayCache = { servers, until: performance.now() + (body.ttl * 1000) / 2 };
    return servers;
  }

  /**
   * The ICE servers of a transport: the app's own, then one of the gateway's relays — the
   * primary, or the next backup after a transport lost its path (the client falls back on its
   * own, without asking the gateway). One relay at a time: one allocation per client, and the
   * browser ranks relay candidates by the server's place in the list, so a list of the same
   * length after a move lets the ICE restart's newer pair win.
   */
  iceServers(relays) {
    const own = this.opts.iceServers ?? [];
    if (!relays?.length) return own;
    return [...own, relays[this.relayTurn % relays.length]];
  }

  open(id, relays) {
    const t = new Transport(id, this.kind, {
      mediaStream: this.opts.mediaStream,
      codec: this.opts.codec,
      encodings: this.opts.encodings,
      iceServers: this.iceServers(relays),
      relayOnly: this.opts.relayOnly === true,
      onConnected: () => this.feed({ type: 'connected', transport: id }),
      onIceLost: () => {
        // The relay may be what failed: the next restart or transport uses the next backup.
        if (this.relayCache) this.relayTurn += 1;
        if (id === this.machine.currentTransport) this.feed({ type: 'lost', transport: id, cause: 'ice' });
      },
    });
    this.transports.set(id, t);
    // Every encoding of a new transport is on: its node has not seen them yet, and one never sent
    // would never be asked for (dynacast speaks of the encodings it has seen).
    if (this.kind === 'publish' && !this.videoEnabled) t.setEncodings(false).catch(report);
    return t;
  }

  async post({ transport: id, endpoint, idempotency_key: key, ticket, failed_node: failedNode }) {
    let t = this.transports.get(id);
    if (!t) {
      // Relays from the gateway (`turn`, or `relayOnly`, which needs them): fetched before the
      // transport gathers its candidates.
      let relays = [];
      if (this.opts.turn || this.opts.relayOnly) {
        try {
          relays = await this.relays();
        } catch (err) {
          this.fail('turn-unavailable', 0, describe(err));
        }
        if (this.ended) return;
      }
      try {
        t = this.transports.get(id) ?? this.open(id, relays);
      } catch (err) {
        this.feed({ type: 'post-failed', transport: id, status: 400, reason: `could not set up: ${describe(err)}` });
        return;
      }
    }
    // The first offer may go straight to a node (`opts.endpoint`); every later one (a recovery)
    // goes through the gateway, which knows which nodes are alive.
    const first = id === 1 && this.opts.endpoint;
    const url = endpoint.to === 'gateway' ? (first ? this.opts.endpoint : this.endpoint()) : endpoint.url;
    const headers = { 'Content-Type': 'application/sdp', 'Idempotency-Key': key, ...this.settings.auth };
    if (ticket != null) headers['Ferry-Ticket'] = ticket;
    if (failedNode != null) headers['Ferry-Failed-Node'] = failedNode;
    const r = await t.post(url, headers).catch((err) => ({ status: 0, reason: describe(err) }));
    if (t.closed || this.ended) return;
    if (r.location) {
      const { location, session, node, ticket: next } = r;
      if (r.layer) this.rememberLayerUrl(location, r.layer);
      // A new session on a node (a first one, a reconnect, a recovery) gets the caps before its
      // media flows: the node would otherwise start it on what its estimate allows.
      if (this.kind === 'play' && this.quality !== null) this.resendQuality(location);
      this.feed({ type: 'answered', transport: id, location, session, node, ticket: next });
      // Connected before the machine heard the answer: say it again now that it listens.
      if (t.connected) this.feed({ type: 'connected', transport: id });
    } else {
      this.feed({ type: 'post-failed', transport: id, status: r.status, reason: r.reason });
    }
  }

  async restart({ transport: id, location }) {
    const t = this.transports.get(id);
    if (!t || t.closed) {
      this.feed({ type: 'restart-failed', transport: id, status: 0, reason: 'no such transport' });
      return;
    }
    // After a lost path, the relay chosen now (the next backup) is used from this restart on.
    if (this.relayCache) t.setIceServers(this.iceServers(this.relayCache.servers));
    const r = await t.restartIce(location, this.settings.auth).catch((err) => ({ status: 0, reason: describe(err) }));
    if (t.closed || this.ended) return;
    if (!r.candidates) {
      this.feed({ type: 'restart-failed', transport: id, status: r.status, reason: r.reason });
      return;
    }
    // A player is through at its next frame: one whose app paused video asks for it until then.
    if (this.kind === 'play' && this.appPaused) this.holdVideo = true;
    this.feed({ type: 'restart-answered', transport: id });
    // A player is through at its next frame (a degraded one, without video, when the path
    // works: the machine decides); a publisher once ICE works on the new path.
    if (await t.waitForPath(r.candidates, r.before, PATH_WAIT)) {
      if (!t.closed && !this.ended) this.feed({ type: 'connected', transport: id });
    }
  }

  adopt(id) {
    for (const [other, t] of this.transports) {
      if (other === id) continue;
      t.close();
      this.transports.delete(other);
    }
    const t = this.transports.get(id) ?? null;
    this.current = t;
    this.previous = null;
    this.lastFrameAt = performance.now();
    this.framesFlowed = (t?.frames ?? 0) > 0;
    if (!t) return;
    if (this.kind === 'publish') {
      this.dynacastFollow();
      t.setEncodings(this.videoEnabled, this.dynacast).catch(report);
      return;
    }
    const tracks = t.tracks();
    for (const track of tracks) if (!this.stream.getTracks().includes(track)) this.stream.addTrack(track);
    for (const track of this.stream.getTracks()) if (!tracks.includes(track)) this.stream.removeTrack(track);
    if (this.video) {
      if (this.video.srcObject !== this.stream) this.video.srcObject = this.stream;
      this.video.play()?.catch?.(() => {});
    }
  }

  closeTransport(id) {
    const t = this.transports.get(id);
    if (!t) return;
    t.close();
    this.transports.delete(id);
    if (this.current === t) this.current = null;
  }

  subscribe(location) {
    this.subscription?.close();
    clearTimeout(this.resubscribeTimer);
    if (this.kind === 'publish' && this.dynacastFollow()) {
      this.current?.setEncodings(this.videoEnabled, this.dynacast).catch(report);
    }
    const sub = new Subscription(location, {
      feed: (input) => this.feed(input),
      onOpen: () => {
        this.eventErrors = 0;
      },
      onError: () => this.eventsDropped(sub).catch(report),
      onTurnDrain: (relays) => this.relaysDrained(relays).catch(report),
      onActive: (encodings) => this.activeEncodings(encodings),
    });
    this.subscription = sub;
  }

  /**
   * Dynacast state is about one transport (its encoders) on one node: another one starts with
   * every encoding on, for its node to see them all. Returns whether the state was dropped.
   */
  dynacastFollow() {
    const key = `${this.current?.id ?? ''}@${this.machine.location ?? ''}`;
    if (key === this.dynacastKey) return false;
    this.dynacastKey = key;
    if (this.dynacast.size === 0) return false;
    this.dynacast.clear();
    return true;
  }

  /**
   * Publish: the node says which simulcast encodings some consumer can use (`active`); the
   * browser stops encoding the others and starts again those wanted back. Emits `dynacast`.
   * @param {{ mid: string|null, rid: string, active: boolean }[]} encodings
   */
  activeEncodings(encodings) {
    if (this.kind !== 'publish' || this.ended) return;
    this.dynacastFollow();
    let changed = false;
    for (const e of encodings) {
      if ((this.dynacast.get(e.rid) ?? true) === e.active) continue;
      this.dynacast.set(e.rid, e.active);
      changed = true;
    }
    if (changed) this.current?.setEncodings(this.videoEnabled, this.dynacast).catch(report);
    this.emit('dynacast', { event: 'dynacast', encodings });
  }

  /**
   * The node says TURN relays drain (`turn-drain`): a transport that may use one of them moves
   * by an ICE restart onto fresh relays from the gateway (which hands out no draining relay);
   * DTLS and the media go on. Emits `relay-moved` (or an `error` `relay-move-failed`).
   * @param {string[]} relays the draining relays' URIs
   */
  async relaysDrained(relays) {
    // The cached list may name them: ask again from now on.
    this.relayCache = null;
    const t = this.current;
    const addresses = relays.map(relayAddress).filter((a) => a !== null);
    if (!t || t.closed || this.ended || this.relayMove || !addresses.length) return;
    if (!(await t.usesRelay(addresses))) return;
    this.relayMove = true;
    const started = performance.now();
    try {
      const before = await t.selectedRelay().catch(() => null);
      let servers;
      try {
        servers = await this.relays();
      } catch (err) {
        this.fail('turn-unavailable', 0, describe(err));
        return;
      }
      if (t.closed || this.ended || t !== this.current || this.machine.location == null) return;
      this.relayTurn = 0;
      t.setIceServers(this.iceServers(servers));
      const r = await t
        .restartIce(this.machine.location, this.settings.auth)
        .catch((err) => ({ status: 0, reason: describe(err) }));
      if (!r.candidates) {
        this.fail('relay-move-failed', r.status, r.reason);
        return;
      }
      const through = await t.waitForPath(r.candidates, r.before, RELAY_MOVE_WAIT);
      const after = await t.selectedRelay().catch(() => null);
      if (!through) {
        this.fail('relay-move-failed', 0, `no path through the new relays within ${RELAY_MOVE_WAIT} ms (last seen: ${t.lastPath})`);
        return;
      }
      this.emit('relay-moved', {
        event: 'relay-moved',
        drained: relays,
        from: before?.url ?? null,
        to: after?.url ?? null,
        ms: Math.round(performance.now() - started),
      });
    } finally {
      this.relayMove = false;
    }
  }

  /** The events stopped: a dead node is a lost transport, a live one gets followed again. */
  async eventsDropped(sub) {
    const alive = await probeNode(sub.location);
    if (this.subscription !== sub || this.ended) return;
    if (!alive) {
      const transport = this.machine.currentTransport;
      if (transport != null) this.feed({ type: 'lost', transport, cause: 'node-unreachable' });
      return;
    }
    this.eventErrors += 1;
    const delay = this.eventErrors === 1 ? 0 : Math.min(RESUBSCRIBE_CAP, 125 * 2 ** this.eventErrors);
    this.resubscribeTimer = setTimeout(() => {
      if (this.subscription === sub && !this.ended) this.subscribe(sub.location);
    }, delay);
  }

  delete(location) {
    this.subscription?.close();
    this.subscription = null;
    const init = { method: 'DELETE', headers: this.settings.auth };
    // keepalive outlives the page; a browser that will not preflight such a request gets a plain one.
    this.deleting = fetch(location, { ...init, keepalive: true })
      .catch(() => fetch(location, init))
      .then(
        () => {},
        () => {},
      );
  }

  setVideo(enabled) {
    this.videoEnabled = enabled;
    if (enabled) this.lastFrameAt = performance.now();
    if (this.kind === 'publish') {
      for (const t of this.transports.values()) {
        t.setEncodings(enabled, t === this.current ? this.dynacast : undefined).catch(report);
      }
    } else {
      this.syncVideo()?.catch((err) => this.fail('set-video-failed', err.status, err.message));
    }
  }

  /** A POST of `body` as JSON to `url`; rejects with an Error (`status`: 0 without an answer). */
  async postJson(url, body) {
    let response;
    let text;
    try {
      ({ response, body: text } = await fetchWithin(
        url,
        { method: 'POST', headers: { 'Content-Type': 'application/json', ...this.settings.auth }, body: JSON.stringify(body) },
        POST_TIMEOUT,
      ));
    } catch (err) {
      throw Object.assign(new Error(describe(err)), { status: 0 });
    }
    if (!response.ok) throw Object.assign(new Error(`${response.status} ${text}`.trim()), { status: response.status });
  }

  /**
   * Play: tells the node serving the session to forward video or not when it does not know yet
   * (the machine or the app changed their minds, or the session moved and its new node may
   * think otherwise). Returns the POST's promise, or null when nothing was due.
   */
  syncVideo() {
    const location = this.machine.location;
    if (this.kind !== 'play' || location == null || this.ended) return null;
    const enabled = this.videoEnabled && (!this.appPaused || this.holdVideo);
    const sent = this.videoSent;
    // A new node: a fresh session forwards video, a moved one keeps what it was told.
    const due = sent?.location === location ? sent.enabled !== enabled : !enabled || sent?.enabled === false;
    if (!due) return null;
    this.videoSent = { location, enabled };
    return this.postJson(`${location}/video`, { enabled });
  }

  setAppPaused(paused) {
    this.appPaused = paused;
    if (!paused) this.holdVideo = false;
    return this.syncVideo() ?? Promise.resolve();
  }

  onlyPlay(what) {
    if (this.kind !== 'play') throw new TypeError(`${what} is for players (play sessions)`);
    if (this.ended) throw new Error(`${what}: the session has ended`);
  }

  /** Play: new caps, sent to the node serving the session now (and to any it moves to). */
  setQuality(caps) {
    this.quality = caps;
    this.qualitySentTo.clear();
    const location = this.machine.location;
    if (location == null || this.ended) return Promise.resolve();
    return this.sendQuality(location);
  }

  /** Play: the caps to the session at `location`, after any POST of caps still running. */
  sendQuality(location) {
    this.qualitySentTo.add(location);
    while (this.qualitySentTo.size > QUALITY_SENT) this.qualitySentTo.delete(this.qualitySentTo.values().next().value);
    const run = this.qualityChain.then(() => {
      const url = this.layerUrls.get(location) ?? `${location}/layer`;
      return this.postJson(url, this.quality ?? {});
    });
    this.qualityChain = run.catch(() => {});
    return run;
  }

  /** Play: the caps to a session that has not had them; a failure is an `error` event. */
  resendQuality(location) {
    if (this.qualitySentTo.has(location)) return;
    this.sendQuality(location).catch((err) => this.fail('set-quality-failed', err.status, err.message));
  }

  rememberLayerUrl(location, url) {
    this.layerUrls.set(location, url);
    while (this.layerUrls.size > QUALITY_SENT) this.layerUrls.delete(this.layerUrls.keys().next().value);
  }

  storeTicket(ticket) {
    if (!this.holdsKey) return;
    try {
      if (ticket == null) storage()?.removeItem(this.ticketKey);
      else storage()?.setItem(this.ticketKey, ticket);
    } catch {
      // Storage full or forbidden: the session only loses resuming after a reload.
    }
  }

  /** A driver-side failure the machine does not hear of, for the app. */
  fail(code, status, message) {
    if (!this.ended) this.emit('error', { event: 'error', code, status, message });
  }

  dispatch(command) {
    const { type, ...payload } = command;
    const name = payload.event;
    if (name === 'migrated') {
      this.lastMigrated = payload;
      this.migrations += 1;
    } else if (name === 'reconnected') {
      this.reconnects += 1;
    } else if (name === 'state' && payload.state === 'connected') {
      this.lastFrameAt = performance.now();
    }
    // A switch that waited for a frame is over.
    if (name === 'state' && payload.state !== 'migrating' && payload.state !== 'reconnecting') this.holdVideo = false;
    this.emit(name, payload);
    if (name !== 'state') return;
    if ((payload.state === 'connected' || payload.state === 'degraded') && !this.settled) {
      this.settled = true;
      this.resolve(this.session);
    } else if (payload.state === 'closed' || payload.state === 'failed') {
      this.teardown();
      if (!this.settled) {
        this.settled = true;
        const err = new Error(payload.reason ?? payload.state);
        err.reason = payload.reason;
        err.state = payload.state;
        this.reject(err);
      }
    }
  }

  emit(name, payload) {
    if (name !== 'stats') {
      this.history.push({ at: performance.now(), ...payload });
      if (this.history.length > HISTORY) this.history.shift();
    }
    for (const fn of [...(this.listeners.get(name) ?? [])]) {
      try {
        fn(payload);
      } catch (err) {
        report(err);
      }
    }
  }

  teardown() {
    this.ended = true;
    clearTimeout(this.timer);
    clearTimeout(this.resubscribeTimer);
    clearInterval(this.frameTimer);
    clearInterval(this.tickTimer);
    this.subscription?.close();
    this.subscription = null;
    for (const t of this.transports.values()) t.close();
    this.transports.clear();
    this.current = null;
    if (this.holdsKey) heldKeys.delete(this.ticketKey);
    this.holdsKey = false;
  }

  /** Play: feeds frames of every open transport as they grow; probes the node on a stall. */
  pollFrames() {
    if (this.ended) return;
    for (const t of this.transports.values()) {
      if (t.closed || t.polling || t.answer == null) continue;
      t.polling = true;
      t.framesDecoded()
        .then(
          (total) => {
            if (t.closed || this.ended || total <= t.frames) return;
            t.frames = total;
            if (t === this.current) {
              this.lastFrameAt = performance.now();
              this.framesFlowed = true;
            }
            this.feed({ type: 'frames', transport: t.id, total });
          },
          () => {},
        )
        .finally(() => {
          t.polling = false;
        })
        .catch(report);
    }
    this.checkStall(performance.now());
  }

  checkStall(now) {
    const t = this.current;
    const location = this.machine.location;
    if (this.machine.state !== 'connected' || !t || !location || !this.framesFlowed || this.probing) return;
    if (now - this.lastFrameAt < STALL_AFTER || now - this.lastProbe < STALL_AFTER) return;
    this.probing = true;
    this.lastProbe = now;
    probeNode(location)
      .then((alive) => {
        const still = performance.now() - this.lastFrameAt >= STALL_AFTER;
        if (!alive && still && !this.ended && this.current === t) {
          this.feed({ type: 'lost', transport: t.id, cause: 'stalled' });
        }
      })
      .finally(() => {
        this.probing = false;
      })
      .catch(report);
  }

  /** Every second: throughput for the machine (while media flows) and the `stats` event. */
  async tick() {
    if (this.ticking || this.ended) return;
    this.ticking = true;
    try {
      const t = this.current;
      const sample = t && !t.closed ? await t.sample().catch(() => null) : null;
      if (this.ended) return;
      if (sample) this.measure(t, sample);
      this.emit('stats', { event: 'stats', ...this.digest(sample) });
    } finally {
      this.ticking = false;
    }
  }

  measure(t, s) {
    const prev = this.previous?.transport === t ? this.previous.sample : null;
    this.previous = { transport: t, sample: s };
    const seconds = prev ? (s.at - prev.at) / 1000 : 0;
    if (seconds <= 0) return;
    this.bitrate = Math.max(0, Math.round(((s.bytes - prev.bytes) * 8) / seconds));
    const state = this.machine.state;
    if (state !== 'connected' && state !== 'degraded') return;
    let bps;
    let loss;
    if (this.kind === 'publish') {
      if (typeof s.availableOutgoingBitrate !== 'number') return;
      bps = Math.round(s.availableOutgoingBitrate);
      loss = s.fractionLost;
    } else {
      bps = this.bitrate;
      const lost = Math.max(0, s.lost - prev.lost);
      const received = Math.max(0, s.packets - prev.packets);
      loss = lost + received > 0 ? lost / (lost + received) : 0;
    }
    this.feed({ type: 'throughput', bps, loss });
  }

  digest(s) {
    const m = this.machine;
    return {
      state: m.state,
      session: m.session,
      node: m.node,
      location: m.location,
      transport: m.currentTransport,
      codec: s?.codec ?? null,
      bitrate: this.bitrate,
      framesDecoded: s?.framesDecoded ?? null,
      framesSent: s?.framesSent ?? null,
      packetsLost: s ? s.lost : null,
      freezeCount: s?.freezeCount ?? null,
      videoEnabled: this.videoEnabled,
      videoPaused: this.appPaused,
      quality: this.quality === null ? null : { ...this.quality },
      inactiveEncodings: [...this.dynacast].filter(([, on]) => !on).map(([rid]) => rid),
      migrated: this.lastMigrated,
      migrations: this.migrations,
      reconnects: this.reconnects,
    };
  }

  async stats() {
    const t = this.current;
    const sample = t && !t.closed ? await t.sample().catch(() => null) : null;
    return this.digest(sample);
  }
}
