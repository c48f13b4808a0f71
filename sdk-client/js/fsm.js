// The session state machine both SDKs share: a line-by-line port of `sdk-client/src/fsm/` (Rust).
// Sans-IO: the driver feeds inputs with the time they happened (`now`, in milliseconds), carries out
// the commands it polls and calls `handleTimeout` at `pollTimeout()`. Inputs, commands and events
// are plain objects in the Rust types' serde JSON form (absent optionals are `null`); both machines
// replay `sdk-client/fsm-scenarios.json` step for step. See docs/sdk.md.

/** Timings (ms) and thresholds; the Rust `Config` defaults, in its camelCase serde form. */
export const DEFAULT_CONFIG = Object.freeze({
  backoffBase: 100,
  backoffCap: 5000,
  connectTimeout: 10_000,
  switchTimeout: 2000,
  restartTimeout: 1000,
  maxAttempts: 12,
  settle: 500,
  edgeLookback: 1000,
  minVideoBps: 150_000,
  maxLoss: 0.15,
  badSamples: 3,
  probeAfter: 10_000,
});

/** Frame times kept for blackout measurement. */
const FRAME_HISTORY = 4000;
/** Video that had to go off again this soon after coming back waits twice as long next time. */
const FLAP_WINDOW = 10_000;
/** Longest wait before trying video again. */
const MAX_PROBE_AFTER = 80_000;

// Why a transport is being set up or restarted (Rust `Purpose`); a migration also has a `mode`.
const INITIAL = 'initial';
const MIGRATE = 'migrate';
const RECOVER = 'recover';

// Phases of a pending transport: POST (or PATCH) sent / answered, waiting for path or frame.
const ASKING = 'asking';
const WAITING = 'waiting';

const LOSS_REASON = {
  ice: 'ICE disconnected',
  'node-unreachable': 'node unreachable',
  stalled: 'media stalled and the node does not answer',
};

/** `Duration::saturating_sub`/`saturating_duration_since`, then `as_millis()`. */
const since = (now, then) => Math.max(0, now - then);
const millis = (ms) => Math.floor(ms);

/**
 * One publish or play session's state machine. Times are numbers of milliseconds on one clock.
 */
export class Machine {
  /**
   * @param {'publish'|'play'} kind
   * @param {object} [config] overrides of {@link DEFAULT_CONFIG} (camelCase, ms)
   * @param {number} seed drives backoff jitter (a u32; 0 counts as 1)
   * @param {string} keySeed prefixes every idempotency key (random, ≥ 16 characters in production)
   */
  constructor(kind, config = {}, seed = 1, keySeed = '') {
    if (kind !== 'publish' && kind !== 'play') throw new Error(`unknown kind ${kind}`);
    this.cfg = { ...DEFAULT_CONFIG, ...config };
    this.kind = kind;
    this._state = 'idle';
    this.rng = seed >>> 0 || 1;
    this.keySeed = String(keySeed);
    this.keys = 0;
    this.transports = 0;
    /** The transport media flows on. */
    this.current = null;
    this.pending = null;
    this._location = null;
    this._session = null;
    this._node = null;
    this._ticket = null;
    /** Attempts since the last success. */
    this.attempt = 0;
    /** `{ at, repeat: { transport, key } | null }` */
    this.retry = null;
    this.lostAt = null;
    this.restartedSame = false;
    this.fresh = false;
    this.switch = null;
    /** Frames each transport decoded so far (play): `[transport, total]` pairs. */
    this.totals = [];
    /** When the frames the app sees grew (play), last few seconds. */
    this.frames = [];
    this.degraded = false;
    this.badRun = 0;
    this.goodRun = 0;
    this.degradedAt = null;
    this.probeAfter = this.cfg.probeAfter;
    this.restoredAt = null;
    this.out = [];
  }

  /** @returns {string} current state */
  get state() {
    return this._state;
  }

  /** @returns {string|null} the session's URL on the node serving it */
  get location() {
    return this._location;
  }

  /** @returns {string|null} the session id */
  get session() {
    return this._session;
  }

  /** @returns {string|null} the node serving the session */
  get node() {
    return this._node;
  }

  /** @returns {number|null} the transport media flows on */
  get currentTransport() {
    return this.current;
  }

  /** @returns {string|null} the ticket that would resume the session now */
  get ticket() {
    return this._ticket;
  }

  /** @returns {object|null} the next command for the driver */
  pollCommand() {
    return this.out.shift() ?? null;
  }

  /** @returns {number|null} when {@link Machine#handleTimeout} has work */
  pollTimeout() {
    if (this._state === 'closed' || this._state === 'failed') return null;
    const times = [
      this.retry?.at,
      this.pending?.deadline,
      this.switch?.done != null ? this.switch.done + this.cfg.settle : null,
    ].filter((t) => t != null);
    return times.length ? Math.min(...times) : null;
  }

  emit(event) {
    this.out.push({ type: 'emit', ...event });
  }

  setState(state, reason = null) {
    if (this._state === state) return;
    const previous = this._state;
    this._state = state;
    this.emit({ event: 'state', state, previous, reason });
  }

  /** The state that media flowing means: connected, or degraded. */
  flowing() {
    return this.degraded ? 'degraded' : 'connected';
  }

  isFlowing() {
    return this._state === 'connected' || this._state === 'degraded';
  }

  nextKey() {
    this.keys += 1;
    return `${this.keySeed}-${this.keys}`;
  }

  nextTransport() {
    this.transports += 1;
    return this.transports;
  }

  random() {
    // xorshift32 on u32, as in the Rust machine.
    let x = this.rng;
    x = (x ^ (x << 13)) >>> 0;
    x = (x ^ (x >>> 17)) >>> 0;
    x = (x ^ (x << 5)) >>> 0;
    this.rng = x;
    return x;
  }

  /**
   * Delay (ms) before attempt `n` (1-based): base·2^(n-1), capped, plus 0–50 % jitter.
   * @param {number} n
   * @returns {number}
   */
  backoff(n) {
    const base = this.cfg.backoffBase;
    const cap = this.cfg.backoffCap;
    const d = Math.min(base * 2 ** Math.min(Math.max(n - 1, 0), 20), cap);
    const jitter = Math.floor((d * (this.random() % 501)) / 1000);
    return d + jitter;
  }

  /**
   * Feeds one input that happened at `now`.
   * @param {number} now
   * @param {object} input
   */
  handleInput(now, input) {
    if (this._state === 'closed' || this._state === 'failed') return;
    switch (input.type) {
      case 'start':
        return this.onStart(now, input.ticket ?? null);
      case 'answered':
        return this.onAnswered(input.transport, input.location, input.session, input.node ?? null, input.ticket ?? null);
      case 'post-failed':
        return this.onPostFailed(now, input.transport, input.status, input.reason);
      case 'connected':
        return this.onConnected(now, input.transport);
      case 'lost':
        return this.onLost(now, input.transport, input.cause);
      case 'migrate':
        return this.onMigrate(now, {
          mode: input.mode,
          from: input.from ?? null,
          target: input.target,
          location: input.location,
          ticket: input.ticket ?? null,
        });
      case 'restart-answered':
        return this.onRestartAnswered(input.transport);
      case 'restart-failed':
        return this.onRestartFailed(now, input.transport, input.status, input.reason);
      case 'frames':
        return this.onFrames(now, input.transport, input.total);
      case 'throughput':
        return this.onThroughput(now, input.bps, input.loss);
      case 'ticket':
        return this.storeTicket(input.ticket);
      case 'ended':
        this.storeTicket(null);
        return this.finish('closed', input.reason);
      case 'close':
        return this.close();
      default:
        throw new Error(`unknown input ${input.type}`);
    }
  }

  /**
   * Drives timers: retries, switch deadlines, the end of a blackout window.
   * @param {number} now
   */
  handleTimeout(now) {
    if (this._state === 'closed' || this._state === 'failed') return;
    if (this.switch?.done != null && now >= this.switch.done + this.cfg.settle) {
      this.reportSwitch();
    }
    const p = this.pending;
    if (p && now >= p.deadline) this.pendingTimedOut(now, p);
    const r = this.retry;
    if (r && now >= r.at) {
      this.retry = null;
      this.attemptRecovery(now, r.repeat);
    }
  }

  storeTicket(ticket) {
    if (ticket === this._ticket) return;
    this._ticket = ticket;
    this.out.push({ type: 'store-ticket', ticket });
  }

  onStart(now, ticket) {
    if (this._state !== 'idle') return;
    this._ticket = ticket;
    this.setState('connecting');
    const transport = this.nextTransport();
    const key = this.nextKey();
    this.post(now, transport, { to: 'gateway' }, INITIAL, null, key);
  }

  /** POSTs an offer of `transport`; the ticket we hold goes along. */
  post(now, transport, endpoint, purpose, mode, key) {
    const ticket = this._ticket;
    const failedNode = purpose === RECOVER ? this._node : null;
    const timeout = purpose === INITIAL ? this.cfg.connectTimeout : this.cfg.switchTimeout;
    this.pending = {
      transport,
      restart: false,
      phase: ASKING,
      purpose,
      mode,
      location: null,
      node: null,
      key,
      ticketed: ticket != null,
      framesAtAnswer: 0,
      deadline: now + timeout,
    };
    this.out.push({
      type: 'post',
      transport,
      endpoint,
      idempotency_key: key,
      ticket,
      failed_node: failedNode,
    });
  }

  /** An ICE restart of the current transport at `location`. */
  restart(now, location, purpose, mode, node) {
    const transport = this.current;
    if (transport == null) return;
    const timeout = purpose === RECOVER ? this.cfg.restartTimeout : this.cfg.switchTimeout;
    this.pending = {
      transport,
      restart: true,
      phase: ASKING,
      purpose,
      mode,
      location,
      node,
      key: '',
      ticketed: false,
      framesAtAnswer: this.total(transport),
      deadline: now + timeout,
    };
    this.out.push({ type: 'restart-ice', transport, location });
  }

  total(transport) {
    return this.totals.find(([t]) => t === transport)?.[1] ?? 0;
  }

  onAnswered(transport, location, session, node, ticket) {
    const p = this.pending;
    if (!p || p.transport !== transport || p.restart || p.phase !== ASKING) return;
    p.phase = WAITING;
    p.location = location;
    p.node = node;
    const ticketed = p.ticketed;
    if (ticketed && this._session != null && this._session !== session) {
      // A ticket that could not resume the session: the server made a new one.
      this.fresh = true;
    }
    this._session = session;
    if (this.current == null) {
      // The first connection: DELETE goes here even before media flows.
      this._location = location;
      if (node != null) this._node = node;
    }
    // The ticket we sent is spent; the answer carries the next one.
    if (ticketed) this._ticket = null;
    if (ticket != null) this.storeTicket(ticket);
    else if (ticketed) this.out.push({ type: 'store-ticket', ticket: null });
  }

  onPostFailed(now, transport, status, reason) {
    const p = this.pending;
    if (!p || p.transport !== transport || p.restart || p.phase !== ASKING) return;
    this.pending = null;
    // A ticket the server refuses (malformed 400, forged 403, replayed 409, expired 410): a clean
    // new session instead, at once (a 400 for anything else fails on the retry).
    if (p.ticketed && (status === 400 || status === 403 || status === 409 || status === 410)) {
      this.emit({ event: 'error', code: 'ticket-rejected', status, message: reason });
      this.storeTicket(null);
      this.fresh = true;
      this.out.push({ type: 'close-transport', transport });
      const t = this.nextTransport();
      const key = this.nextKey();
      const purpose = p.purpose === INITIAL ? INITIAL : RECOVER;
      this.post(now, t, { to: 'gateway' }, purpose, null, key);
      return;
    }
    this.emit({ event: 'error', code: 'post-failed', status, message: reason });
    const initial = p.purpose === INITIAL && this.current == null;
    // No answer, overload, or (while recovering) a stream not back yet: try again.
    const retryable =
      status === 0 ||
      status === 429 ||
      status >= 500 ||
      (status === 404 && !initial) ||
      (status === 409 && !initial);
    if (!retryable) {
      this.out.push({ type: 'close-transport', transport });
      if (this.current != null && p.purpose === MIGRATE && p.mode === 'reconnect') {
        // The old transport may still work: recover from there.
        this.recover(now, `reconnect refused (${status})`);
        return;
      }
      this.finish('failed', `POST answered ${status}: ${reason}`);
      return;
    }
    // Without an answer the server may have made the session: repeat the same request.
    const repeat = status === 0 ? { transport, key: p.key } : null;
    if (repeat == null) this.out.push({ type: 'close-transport', transport });
    if (p.purpose !== INITIAL && this.lostAt == null) this.lostAt = now;
    if (p.purpose === MIGRATE) {
      this.recover(now, `migration POST failed (${status})`);
      return;
    }
    this.scheduleRetry(now, `POST failed (${status}): ${reason}`, repeat);
  }

  /** Waits (exponential backoff) before the next attempt. */
  scheduleRetry(now, reason, repeat) {
    this.attempt += 1;
    if (this.attempt > this.cfg.maxAttempts) {
      this.emit({ event: 'error', code: 'gave-up', status: 0, message: reason });
      this.finish('failed', `gave up after ${this.cfg.maxAttempts} attempts: ${reason}`);
      return;
    }
    const delay = this.backoff(this.attempt);
    this.emit({ event: 'reconnecting', attempt: this.attempt + 1, delayMs: millis(delay), reason });
    this.retry = { at: now + delay, repeat };
  }

  /** The transport is lost (or a migration failed): recover. */
  recover(now, reason) {
    if (this.lostAt == null) this.lostAt = now;
    this.restartedSame = false;
    this.setState('reconnecting', reason);
    this.emit({ event: 'reconnecting', attempt: this.attempt + 1, delayMs: 0, reason });
    this.attemptRecovery(now, null);
  }

  /**
   * One recovery attempt: an ICE restart at the same URL first, then POSTs with the ticket
   * through the gateway (`repeat`: the request that got no answer, sent again).
   */
  attemptRecovery(now, repeat) {
    if (this._state === 'connecting' && this.current == null) {
      // Still the first connection: try it again.
      const t = repeat ? repeat.transport : this.nextTransport();
      const key = repeat ? repeat.key : this.nextKey();
      this.post(now, t, { to: 'gateway' }, INITIAL, null, key);
      return;
    }
    if (!this.restartedSame && this.current != null && this._location != null) {
      this.restartedSame = true;
      this.restart(now, this._location, RECOVER, null, this._node);
      return;
    }
    const t = repeat ? repeat.transport : this.nextTransport();
    const key = repeat ? repeat.key : this.nextKey();
    this.post(now, t, { to: 'gateway' }, RECOVER, null, key);
  }

  pendingTimedOut(now, p) {
    this.pending = null;
    const waited = p.phase === ASKING ? 'no answer' : 'no media';
    if (!p.restart && p.transport !== this.current) {
      this.out.push({ type: 'close-transport', transport: p.transport });
    }
    if (p.purpose === INITIAL) {
      this.scheduleRetry(now, `connecting: ${waited}`, null);
    } else if (p.purpose === MIGRATE) {
      this.emit({
        event: 'error',
        code: 'migration-timeout',
        status: 0,
        message: `${p.mode}: ${waited}`,
      });
      this.switch = null;
      this.recover(now, `migration: ${waited}`);
    } else if (p.restart) {
      // Step 1 did not work in time: the ticket through the gateway, now.
      this.attemptRecovery(now, null);
    } else {
      this.scheduleRetry(now, `reconnect: ${waited}`, null);
    }
  }

  onConnected(now, transport) {
    const p = this.pending;
    if (!p || p.transport !== transport || p.phase !== WAITING) return;
    // Publishers are through when the path works; players at their first frame — unless video
    // is off (degraded: no frame comes), and the first connection counts as soon as the path
    // works.
    if (this.kind === 'publish' || p.purpose === INITIAL || this.degraded) this.switched(now, p);
  }

  onRestartAnswered(transport) {
    const frames = this.total(transport);
    const p = this.pending;
    if (!p || p.transport !== transport || !p.restart || p.phase !== ASKING) return;
    p.phase = WAITING;
    p.framesAtAnswer = frames;
    // The PATCH was answered by the session's node: DELETE and events go there now.
    if (p.location != null) {
      this._location = p.location;
      this.out.push({ type: 'subscribe', location: p.location });
    }
  }

  onRestartFailed(now, transport, status, reason) {
    const p = this.pending;
    if (!p || p.transport !== transport || !p.restart || p.phase !== ASKING) return;
    this.pending = null;
    this.emit({ event: 'error', code: 'restart-failed', status, message: reason });
    if (p.purpose === RECOVER) {
      this.attemptRecovery(now, null);
    } else {
      this.switch = null;
      this.recover(now, `ICE restart at the target failed (${status})`);
    }
  }

  onFrames(now, transport, total) {
    if (this.kind !== 'play') return;
    const before = this.total(transport);
    if (total <= before) return;
    const entry = this.totals.find(([t]) => t === transport);
    if (entry) entry[1] = total;
    else this.totals.push([transport, total]);
    if (transport === this.current) this.frameSeen(now);
    const p = this.pending;
    if (!p || p.transport !== transport || p.phase !== WAITING) return;
    if (p.restart && total <= p.framesAtAnswer) return;
    this.switched(now, p);
  }

  frameSeen(now) {
    this.frames.push(now);
    while (this.frames.length && since(now, this.frames[0]) > FRAME_HISTORY) this.frames.shift();
  }

  /** `p` carries media now. */
  switched(now, p) {
    this.pending = null;
    const old = this.current;
    if (!p.restart) {
      this.current = p.transport;
      this.out.push({ type: 'adopt', transport: p.transport });
      this.totals = this.totals.filter(([t]) => t === p.transport);
      // The new transport's first frame is the first the app sees.
      if (this.kind === 'play') this.frameSeen(now);
    }
    if (p.location != null && (this._location !== p.location || !p.restart)) {
      this._location = p.location;
      if (!p.restart) this.out.push({ type: 'subscribe', location: p.location });
    }
    if (p.node != null) this._node = p.node;
    this.attempt = 0;
    this.retry = null;
    const previous = this._state;
    if (p.purpose === INITIAL && old == null) {
      this.lostAt = null;
      this.fresh = false;
      this.setState(this.flowing());
    } else if (p.purpose === MIGRATE) {
      if (this.switch) {
        this.switch.done = now;
        this.switch.to = this._node ?? this.switch.to;
      }
      this.setState(this.flowing());
    } else {
      const downtime = this.lostAt == null ? 0 : millis(since(now, this.lostAt));
      this.lostAt = null;
      const how = p.restart ? 'ice-restart' : 'reconnect';
      this.setState(this.flowing());
      if (previous !== 'connecting' || old != null) {
        this.emit({
          event: 'reconnected',
          downtimeMs: downtime,
          how,
          resumed: !this.fresh,
          node: this._node,
        });
      }
      this.fresh = false;
    }
  }

  onLost(now, transport, cause) {
    if (transport !== this.current) return;
    // A switch is under way; its own deadline decides.
    if (this.pending && this.pending.purpose !== INITIAL) return;
    if (!this.isFlowing()) return;
    this.recover(now, LOSS_REASON[cause] ?? String(cause));
  }

  onMigrate(now, m) {
    if (!this.isFlowing()) {
      // Mid-recovery: the ticket through the gateway finds the session wherever it went.
      if (m.mode === 'edge') {
        this._location = m.location;
        this._node = m.target;
      }
      return;
    }
    const from = m.from ?? this._node;
    const windowStart = m.mode === 'edge' ? now - this.cfg.edgeLookback : now;
    this.switch = { mode: m.mode, from, to: m.target, started: now, windowStart, done: null };
    this.setState('migrating');
    if (m.mode === 'edge') {
      // The edge moved the session already: follow its URL and events.
      this._location = m.location;
      this._node = m.target;
      this.out.push({ type: 'subscribe', location: m.location });
      this.switch.done = now;
      this.setState(this.flowing());
    } else if (m.mode === 'ice-restart') {
      this.restart(now, m.location, MIGRATE, 'ice-restart', m.target);
    } else if (m.mode === 'reconnect') {
      if (m.ticket != null) this.storeTicket(m.ticket);
      const t = this.nextTransport();
      const key = this.nextKey();
      this.post(now, t, { to: 'url', url: m.location }, MIGRATE, 'reconnect', key);
    }
  }

  /** Emits `migrated` for the switch whose window just closed. */
  reportSwitch() {
    const s = this.switch;
    this.switch = null;
    if (!s || s.done == null) return;
    const firstFrameMs = millis(since(s.done, s.started));
    let blackoutMs;
    if (this.kind === 'play') {
      const end = s.done + this.cfg.settle;
      let largest = 0;
      let prev = null;
      for (const t of this.frames) {
        if (prev != null && t > s.windowStart && prev <= end) {
          largest = Math.max(largest, Math.min(t, end) - prev);
        }
        prev = t;
      }
      blackoutMs = millis(largest);
    } else {
      blackoutMs = s.mode === 'edge' ? 0 : firstFrameMs;
    }
    this.emit({ event: 'migrated', mode: s.mode, from: s.from, to: s.to, blackoutMs, firstFrameMs });
  }

  onThroughput(now, bps, loss) {
    if (!this.isFlowing()) return;
    // A player's bitrate is what its publisher sends (a still scene is cheap), and with video off
    // only loss tells how the network is; a publisher's is what its path carries.
    const bad =
      this.kind === 'publish' && !this.degraded
        ? bps < this.cfg.minVideoBps || loss > this.cfg.maxLoss
        : loss > this.cfg.maxLoss;
    if (bad) {
      this.badRun += 1;
      this.goodRun = 0;
    } else {
      this.badRun = 0;
      this.goodRun += 1;
    }
    if (!this.degraded && this.badRun >= this.cfg.badSamples) {
      if (this.restoredAt != null && since(now, this.restoredAt) < FLAP_WINDOW) {
        this.probeAfter = Math.min(this.probeAfter * 2, MAX_PROBE_AFTER);
      }
      this.degraded = true;
      this.degradedAt = now;
      this.badRun = 0;
      this.out.push({ type: 'set-video', enabled: false });
      this.emit({ event: 'degraded', active: true, bps, loss });
      this.setState('degraded');
    } else if (
      this.degraded &&
      !bad &&
      this.degradedAt != null &&
      since(now, this.degradedAt) >= this.probeAfter
    ) {
      this.degraded = false;
      this.restoredAt = now;
      this.goodRun = 0;
      this.out.push({ type: 'set-video', enabled: true });
      this.emit({ event: 'degraded', active: false, bps, loss });
      this.setState('connected');
    } else if (!this.degraded && this.restoredAt != null && since(now, this.restoredAt) >= FLAP_WINDOW) {
      // Video held: the next degradation starts from the configured wait again.
      this.probeAfter = this.cfg.probeAfter;
      this.restoredAt = null;
    }
  }

  close() {
    if (this._location != null) this.out.push({ type: 'delete', location: this._location });
    this.storeTicket(null);
    this.finish('closed', 'closed');
  }

  /** Ends the machine: every transport closed, nothing pending. */
  finish(state, reason) {
    const ts = this.totals.map(([t]) => t);
    if (this.current != null) ts.push(this.current);
    if (this.pending) ts.push(this.pending.transport);
    if (this.retry?.repeat) ts.push(this.retry.repeat.transport);
    this.pending = null;
    this.retry = null;
    this.switch = null;
    for (const transport of [...new Set(ts)].sort((a, b) => a - b)) {
      this.out.push({ type: 'close-transport', transport });
    }
    this.current = null;
    this.setState(state, reason);
  }
}
