// A room (docs/rooms.md, "Signalling: joining a room"): one WebSocket to the node hosting the
// participant, commands carrying idempotency keys and answered by receipts, the room's state kept
// from the welcome and the event frames. The socket is replaced when it drops (backoff, through
// the gateway) and when a session published in the room migrates to another node; after either,
// the new welcome is diffed against what the room had and the difference is emitted as events.

import { RoomView, isObject } from './room-view.js';
import { describe, randomKeySeed } from './transport.js';

/** The first join (POST, WebSocket, welcome, receipt) and each later connection get this long. */
const JOIN_TIMEOUT = 10_000;
/** Reconnect delays: this, doubling, up to the cap. */
const BACKOFF_BASE = 250;
const BACKOFF_CAP = 5000;
/** `WebSocket.OPEN`. */
const OPEN = 1;
const LAYOUTS = new Set(['grid', 'speaker', 'sidebar']);
/** A gateway that answers one of these will not let this participant in: no retrying. */
const FATAL_STATUS = new Set([400, 401, 403, 404]);

const clock = () => (typeof globalThis.performance?.now === 'function' ? performance.now() : Date.now());

function report(err) {
  if (typeof globalThis.reportError === 'function') globalThis.reportError(err);
  else console.error(err);
}

/** An Error with the protocol's `code` (and the command's `key`, the HTTP `status` when known). */
function roomError(code, message, extra = {}) {
  const err = new Error(message);
  err.code = code;
  Object.assign(err, extra);
  return err;
}

/** `promise`, or a `timeout` error after `ms` (then `onTimeout`). */
function within(promise, ms, what, onTimeout = () => {}) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => {
      onTimeout();
      reject(roomError('timeout', `no ${what} within ${JOIN_TIMEOUT} ms`));
    }, Math.max(0, ms));
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/** One WebSocket to a node: its frames parsed, its welcome awaited. */
class Connection {
  /**
   * @param {Function} WebSocketImpl
   * @param {string} url
   * @param {object} answer the join endpoint's answer that named this socket
   * @param {{ frame: (c: Connection, f: object) => void, closed: (c: Connection, reason: string) => void }} handlers
   */
  constructor(WebSocketImpl, url, answer, handlers) {
    this.answer = answer;
    /** Set when the room no longer wants this socket: its close is no loss. */
    this.retired = false;
    this.closed = false;
    this.welcome = null;
    /** Per `subscribe` frame sent here, in order: the waiters its `subscribed` answers. */
    this.subscribes = [];
    this.welcomed = new Promise((resolve, reject) => {
      this.onWelcome = resolve;
      this.onNoWelcome = reject;
    });
    this.welcomed.catch(() => {});
    this.ws = new WebSocketImpl(url);
    this.ws.onmessage = (e) => {
      if (this.closed || typeof e.data !== 'string') return;
      let frame;
      try {
        frame = JSON.parse(e.data);
      } catch {
        return;
      }
      if (!isObject(frame)) return;
      if (frame.type === 'welcome' && this.welcome === null) {
        this.welcome = frame;
        this.onWelcome(frame);
        return;
      }
      handlers.frame(this, frame);
    };
    this.ws.onclose = (e) => {
      if (this.closed) return;
      this.closed = true;
      const reason = `closed (${e?.code ?? 'no code'}${e?.reason ? `: ${e.reason}` : ''})`;
      // 4401 / 4403: the node refused the token (4000 + the HTTP status); retrying cannot help.
      const refused = e?.code === 4401 || e?.code === 4403;
      this.refusal = refused
        ? roomError(e.code === 4403 ? 'forbidden' : 'unauthorized', `the node refused the access token: ${e?.reason ?? ''}`, {
            fatal: true,
            status: e.code - 4000,
          })
        : null;
      this.onNoWelcome(this.refusal ?? roomError('closed', `the room connection ${reason}`));
      handlers.closed(this, reason);
    };
    // An error is followed by a close, which is where the room acts.
    this.ws.onerror = () => {};
  }

  /** @returns {boolean} whether the frame went out */
  send(frame) {
    if (this.closed || this.ws.readyState !== OPEN) return false;
    this.ws.send(JSON.stringify(frame));
    return true;
  }

  close() {
    this.retired = true;
    try {
      this.ws.close(1000);
    } catch {
      // Already closing.
    }
  }
}

let start;

/**
 * A room joined with {@link FerryClient#join}: the participants and their state, chat and
 * reactions, kept up to date; commands that resolve with the node's receipt; media published and
 * played through the client. Events: `joined`, `left`, `register`, `published`, `unpublished`,
 * `chat`, `reactions` (the server's events), `connected`, `reconnecting`, `moved`, `error`.
 */
export class Room {
  #client;
  #settings;
  #WebSocket;
  #fetch;
  #name;
  #participant;
  #displayName;
  #metadata;
  #node = null;
  #http = null;
  #state = 'joining';
  #view = new RoomView();
  #listeners = new Map();
  #keySeed = randomKeySeed();
  #keys = 0;
  /** The socket the room listens to (welcomed); null while reconnecting. */
  #conn = null;
  /** Every socket not yet closed, current or being set up. */
  #conns = new Set();
  /** Joined on `#conn`: commands go out at once (otherwise they wait for the next join). */
  #ready = false;
  /** Commands not answered yet, oldest first: `{ key, frame, resolve, reject, once, conn }`. */
  #pending = [];
  #subscription = null;
  #subscribers = new Set();
  #reconnecting = false;
  #timer = null;
  #wake = null;
  #moving = false;
  #moveTo = null;
  #sessions = new Set();
  #published = new Map();

  static {
    start = (room) => room.#start();
  }

  /** Made by {@link FerryClient#join}. */
  constructor(client, settings, name, opts = {}) {
    if (typeof name !== 'string' || name === '') throw new TypeError('join: the room id must be a non-empty string');
    this.#client = client;
    this.#settings = settings;
    this.#name = name;
    this.#participant = opts.participant ?? null;
    this.#displayName = opts.name ?? null;
    this.#metadata = opts.metadata ?? '';
    this.#WebSocket = opts.WebSocket ?? globalThis.WebSocket;
    // Unbound, a browser's fetch throws "Illegal invocation".
    this.#fetch = opts.fetch ?? ((...args) => globalThis.fetch(...args));
    if (typeof this.#WebSocket !== 'function') throw new TypeError('join: no WebSocket in this runtime (pass one)');
  }

  /** @returns {string} the room id */
  get name() {
    return this.#name;
  }

  /** @returns {string} this participant's id */
  get participant() {
    return this.#participant;
  }

  /** @returns {string|null} the node the room's WebSocket is on */
  get node() {
    return this.#node;
  }

  /** @returns {'joining'|'joined'|'reconnecting'|'left'|'closed'|'failed'} */
  get state() {
    return this.#state;
  }

  /**
   * @returns {Map<string, { name: string|null, metadata: string, audioMuted: boolean,
   *   videoMuted: boolean, handRaised: boolean, layout: string|null, attributes: object,
   *   tracks: Map<string, { stream: string, kind: string }> }>} the participants by id (this one
   *   included); read only
   */
  get participants() {
    return this.#view.participants;
  }

  /**
   * @returns {{ participant: string, text: string, stamp: string, at: number }[]} the chat, in
   *   the order the room learned of it; read only
   */
  get chat() {
    return this.#view.chat;
  }

  /** @returns {number} the reactions counter */
  get reactions() {
    return this.#view.reactions;
  }

  /**
   * Listens to an event: the server's `joined`, `left`, `register`, `published`, `unpublished`,
   * `chat`, `reactions` (its fields, plus `at` — `performance.now()` when it arrived — and, after
   * a reconnect or move, `resync: true` on those found by diffing the welcome; a chat event's
   * own time is `sentAt`); `connected` `{node}`, `reconnecting` `{reason, attempt, delayMs}`,
   * `moved` `{from, to}`, `error` `{code, message}`.
   * @param {string} event
   * @param {(payload: object) => void} fn
   * @returns {this}
   */
  on(event, fn) {
    const set = this.#listeners.get(event) ?? new Set();
    set.add(fn);
    this.#listeners.set(event, set);
    return this;
  }

  /**
   * Stops listening.
   * @param {string} event
   * @param {(payload: object) => void} fn
   * @returns {this}
   */
  off(event, fn) {
    this.#listeners.get(event)?.delete(fn);
    return this;
  }

  /**
   * Sends a command frame (`key` filled in when missing) and resolves with its receipt `{key,
   * duplicate, stamp}`, or rejects with the node's refusal (an Error with `code` and `key`). A
   * command the socket dropped before it was answered goes again, same key, after the reconnect.
   * @param {{ type: string, key?: string }} frame
   * @returns {Promise<{ key: string, duplicate: boolean, stamp: string }>}
   */
  send(frame) {
    if (this.#ended()) return Promise.reject(roomError('closed', `the room is ${this.#state}`));
    if (!isObject(frame) || typeof frame.type !== 'string') {
      return Promise.reject(new TypeError('send: a frame needs a type'));
    }
    const { type, key, ...rest } = frame;
    return this.#command({ type, key: key ?? this.#nextKey(), ...rest }, false);
  }

  /**
   * Mutes or unmutes this participant's audio or video (the register; the media is the app's).
   * @param {'audio'|'video'} kind
   * @param {boolean} muted
   */
  setMuted(kind, muted) {
    if (kind !== 'audio' && kind !== 'video') {
      return Promise.reject(new TypeError("setMuted: kind is 'audio' or 'video'"));
    }
    return this.send({ type: 'set', register: `${kind}_muted`, value: Boolean(muted) });
  }

  /** Raises (or lowers) this participant's hand. */
  raiseHand(raised = true) {
    return this.send({ type: 'set', register: 'hand_raised', value: Boolean(raised) });
  }

  /** @param {'grid'|'speaker'|'sidebar'} layout */
  setLayout(layout) {
    if (!LAYOUTS.has(layout)) return Promise.reject(new TypeError('setLayout: grid, speaker or sidebar'));
    return this.send({ type: 'set', register: 'layout', value: layout });
  }

  /**
   * Sets custom attributes, one command per key (`null` deletes it).
   * @param {Record<string, string|null>} attributes
   * @returns {Promise<object[]>} the receipts, in the order of the keys
   */
  setAttributes(attributes) {
    if (!isObject(attributes)) return Promise.reject(new TypeError('setAttributes: an object of attributes'));
    const set = ([name, value]) => this.send({ type: 'set', register: 'attribute', name, value: value ?? null });
    return Promise.all(Object.entries(attributes).map(set));
  }

  /** @param {string} text */
  sendChat(text) {
    return this.send({ type: 'chat', text: String(text) });
  }

  /** Adds `delta` (±1..1000) to the reactions counter. */
  react(delta = 1) {
    return this.send({ type: 'react', delta });
  }

  /**
   * Chooses which events this connection gets (and the reconnected ones: it is sent again):
   * `events` (types; null = all), `participants` (whose `register` events; null = everyone).
   * Resolves when the node confirmed (`subscribed`).
   * @param {{ events?: string[]|null, participants?: string[]|null }} [which]
   * @returns {Promise<void>}
   */
  subscribeEvents({ events = null, participants = null } = {}) {
    if (this.#ended()) return Promise.reject(roomError('closed', `the room is ${this.#state}`));
    const frame = { type: 'subscribe', events, participants };
    this.#subscription = frame;
    return new Promise((resolve, reject) => {
      const waiter = { resolve, reject };
      this.#subscribers.add(waiter);
      if (this.#conn?.send(frame)) this.#conn.subscribes.push([waiter]);
    });
  }

  /**
   * Leaves the room (tracks and registers go with the participant), then closes the socket and
   * the sessions published or played through the room.
   * @returns {Promise<object>} the receipt
   */
  async leave() {
    const receipt = await this.send({ type: 'leave' });
    this.#finish('left', roomError('closed', 'the room was left'));
    return receipt;
  }

  /**
   * Stops without leaving: the socket and the room's sessions close; the node keeps the
   * participant for its grace period (10 s).
   */
  close() {
    if (!this.#ended()) this.#finish('closed', roomError('closed', 'the room was closed'));
  }

  /**
   * Publishes `mediaStream` on the room's node (WHIP, stream `{room}.{participant}.{track}`) and
   * announces it as `track`. When the session migrates to another node the room's socket follows
   * it there.
   * @param {MediaStream} mediaStream
   * @param {{ track?: string, kind?: string, codec?: 'vp8'|'h264' } & object} [opts] the rest
   *   goes to `FerryClient.publish`
   * @returns {Promise<object>} the session
   */
  async publish(mediaStream, { track = 'cam', kind = 'video', ...opts } = {}) {
    if (this.#ended()) throw roomError('closed', `the room is ${this.#state}`);
    const stream = `${this.#name}.${this.#participant}.${track}`;
    // Stream names are ids like the room's (docs/rooms.md): 64 characters at most.
    if (stream.length > 64) throw roomError('bad_request', `publish: the stream name ${stream} is over 64 characters`);
    const endpoint = `${this.#http}/whip/${encodeURIComponent(stream)}`;
    const session = await this.#client.publish(stream, mediaStream, { ...opts, endpoint });
    if (this.#ended()) {
      session.close().catch(report);
      throw roomError('closed', `the room is ${this.#state}`);
    }
    this.#sessions.add(session);
    this.#published.set(track, session);
    session.on('migrated', () => this.#follow(session));
    try {
      await this.send({ type: 'publish', track, stream, kind });
    } catch (err) {
      this.#sessions.delete(session);
      if (this.#published.get(track) === session) this.#published.delete(track);
      session.close().catch(report);
      throw err;
    }
    return session;
  }

  /**
   * Withdraws `track` and closes its session (if this room published it).
   * @param {string} [track]
   * @returns {Promise<object>} the receipt
   */
  async unpublish(track = 'cam') {
    const receipt = await this.send({ type: 'unpublish', track });
    const session = this.#published.get(track);
    this.#published.delete(track);
    if (session) {
      this.#sessions.delete(session);
      await session.close();
    }
    return receipt;
  }

  /**
   * Plays a participant's track (WHEP, through the gateway).
   * @param {string} participant
   * @param {string} [track]
   * @param {object} [opts] for `FerryClient.play` (`video`, …)
   * @returns {Promise<object>} the session
   */
  subscribe(participant, track = 'cam', opts = {}) {
    const t = this.#view.participants.get(participant)?.tracks.get(track);
    if (!t) return Promise.reject(roomError('unknown_track', `${participant} publishes no track ${track}`));
    const playing = this.#client.play(t.stream, opts);
    playing.then((s) => (this.#ended() ? s.close() : this.#sessions.add(s)), () => {}).catch(report);
    return playing;
  }

  // ---- connecting ----------------------------------------------------------------------------

  async #start() {
    const deadline = clock() + JOIN_TIMEOUT;
    try {
      await this.#adopt(await this.#open(this.#gateway(), deadline), deadline);
    } catch (err) {
      this.#finish('failed', err);
      throw err;
    }
    this.#state = 'joined';
    this.#emit('connected', { type: 'connected', node: this.#node });
    return this;
  }

  #gateway() {
    return `${this.#settings.baseUrl}/v1/rooms/${encodeURIComponent(this.#name)}/join`;
  }

  /** POSTs the join endpoint `url`, opens the socket it names and waits for the welcome. */
  async #open(url, deadline) {
    const answer = await this.#post(url, deadline);
    const ws = new URL(answer.ws, url);
    if (this.#settings.token) ws.searchParams.set('access_token', this.#settings.token);
    // JSON text frames: native in every browser, no protobuf runtime to ship (the node's default
    // is protobuf binary frames, which the Rust SDK speaks).
    ws.searchParams.set('format', 'json');
    const conn = new Connection(this.#WebSocket, ws.href, answer, {
      frame: (c, f) => this.#frame(c, f),
      closed: (c, reason) => this.#closed(c, reason),
    });
    this.#conns.add(conn);
    try {
      await within(conn.welcomed, deadline - clock(), 'welcome');
    } catch (err) {
      conn.close();
      throw err;
    }
    return conn;
  }

  async #post(url, deadline) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), Math.max(0, deadline - clock()));
    let response;
    let text;
    try {
      response = await this.#fetch(url, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', ...this.#settings.auth },
        body: JSON.stringify({ participant: this.#participant ?? undefined, name: this.#displayName ?? undefined }),
        signal: ctl.signal,
      });
      text = await response.text();
    } catch (err) {
      if (ctl.signal.aborted) {
        throw roomError('timeout', `no answer to the join within ${JOIN_TIMEOUT} ms`, { status: 0 });
      }
      throw roomError('join-refused', `join: ${describe(err)}`, { status: 0 });
    } finally {
      clearTimeout(timer);
    }
    if (!response.ok) {
      throw roomError('join-refused', `join: ${response.status} ${text}`.trim(), {
        status: response.status,
        fatal: FATAL_STATUS.has(response.status),
      });
    }
    let answer = null;
    try {
      answer = JSON.parse(text);
    } catch {
      // Said below.
    }
    if (!isObject(answer) || typeof answer.ws !== 'string' || typeof answer.http !== 'string') {
      const what = `join: an answer without ws/http: ${text.slice(0, 200)}`;
      throw roomError('join-refused', what, { status: response.status });
    }
    return answer;
  }

  /**
   * Makes `conn` (welcomed) the room's socket: the state resynchronised from its welcome, the
   * subscription and a join (fresh key) sent; once joined, the unanswered commands go again.
   */
  async #adopt(conn, deadline) {
    const first = this.#state === 'joining';
    this.#conn = conn;
    this.#ready = false;
    const welcome = conn.welcome;
    this.#participant =
      typeof welcome.participant === 'string' ? welcome.participant : (conn.answer.participant ?? this.#participant);
    this.#node = welcome.node ?? conn.answer.node ?? null;
    this.#http = conn.answer.http.replace(/\/+$/, '');
    this.#resync(welcome.state, !first);
    if (this.#subscription && conn.send(this.#subscription)) conn.subscribes.push([...this.#subscribers]);
    const name = this.#displayName ?? this.#participant;
    const join = { type: 'join', key: this.#nextKey(), name, metadata: this.#metadata };
    const joined = this.#command(join, true);
    const receipt = await within(joined, deadline - clock(), 'join receipt', () => this.#drop(join.key));
    if (this.#conn !== conn || conn.closed) throw roomError('closed', 'the room connection closed');
    this.#ready = true;
    for (const entry of this.#pending) if (!entry.once) this.#transmit(entry);
    return receipt;
  }

  /** The current socket dropped: connect again through the gateway, with backoff, until joined. */
  async #reconnect(reason) {
    if (this.#reconnecting || this.#ended()) return;
    this.#reconnecting = true;
    this.#state = 'reconnecting';
    this.#ready = false;
    this.#conn?.close();
    this.#conn = null;
    for (let attempt = 1; ; attempt += 1) {
      const delayMs = Math.min(BACKOFF_CAP, BACKOFF_BASE * 2 ** (attempt - 1));
      this.#emit('reconnecting', { type: 'reconnecting', reason, attempt, delayMs });
      await this.#sleep(delayMs);
      if (this.#ended()) return;
      const deadline = clock() + JOIN_TIMEOUT;
      let conn = null;
      try {
        conn = await this.#open(this.#gateway(), deadline);
        if (this.#ended()) return void conn.close();
        await this.#adopt(conn, deadline);
        this.#reconnecting = false;
        this.#state = 'joined';
        this.#emit('connected', { type: 'connected', node: this.#node });
        return;
      } catch (err) {
        if (this.#conn === conn) {
          this.#conn = null;
          this.#ready = false;
        }
        conn?.close();
        if (this.#ended()) return;
        if (err.fatal || (err.key && err.code !== 'overloaded')) {
          // The gateway or the node refuses this participant: retrying will not change that.
          this.#reconnecting = false;
          this.#fail(err);
          return;
        }
        reason = err.message;
      }
    }
  }

  #sleep(ms) {
    return new Promise((resolve) => {
      this.#wake = resolve;
      this.#timer = setTimeout(resolve, ms);
    });
  }

  /** A session of the room migrated: the socket follows it to its new node. */
  #follow(session) {
    let origin;
    try {
      origin = new URL(session.location).origin;
    } catch {
      return;
    }
    if (this.#http && new URL(this.#http).origin === origin) return;
    this.#move(origin).catch(report);
  }

  /** Make before break: join on the node at `origin`, then close the old socket. */
  async #move(origin) {
    if (this.#state !== 'joined' || this.#reconnecting) return;
    if (this.#moving) {
      this.#moveTo = origin;
      return;
    }
    this.#moving = true;
    const old = this.#conn;
    const from = this.#node;
    const deadline = clock() + JOIN_TIMEOUT;
    let conn = null;
    let switched = false;
    try {
      conn = await this.#open(`${origin}/v1/rooms/${encodeURIComponent(this.#name)}/join`, deadline);
      if (this.#conn !== old || this.#state !== 'joined') return void conn.close();
      // From here on the new socket's events count; the old one still answers what was sent on it.
      old.retired = true;
      switched = true;
      await this.#adopt(conn, deadline);
      old.close();
      this.#emit('moved', { type: 'moved', from, to: this.#node });
      this.#emit('connected', { type: 'connected', node: this.#node });
    } catch (err) {
      if (this.#ended()) return;
      const message = `moving to ${origin}: ${err.message}`;
      if (switched) {
        // Not joined there: start over through the gateway (which closes `conn`).
        old.close();
        if (this.#conn === conn) this.#reconnect(message).catch(report);
      } else {
        conn?.close();
        if (this.#conn === old) this.#emit('error', { type: 'error', code: 'move-failed', message });
      }
    } finally {
      this.#moving = false;
      const next = this.#moveTo;
      this.#moveTo = null;
      if (next && !this.#ended() && new URL(this.#http).origin !== next) this.#move(next).catch(report);
    }
  }

  #closed(conn, reason) {
    this.#conns.delete(conn);
    if (conn.refusal && conn === this.#conn && this.#state === 'joined') {
      this.#fail(conn.refusal);
      return;
    }
    const err = roomError('closed', `the room connection ${reason}`);
    for (const entry of this.#pending.filter((e) => e.once && e.conn === conn)) this.#settle(entry, err, null);
    if (conn === this.#conn && !conn.retired && this.#state === 'joined') this.#reconnect(reason).catch(report);
  }

  // ---- frames --------------------------------------------------------------------------------

  #frame(conn, f) {
    switch (f.type) {
      case 'receipt':
        this.#answer(f.key, null, { key: f.key, duplicate: f.duplicate === true, stamp: f.stamp ?? null });
        return;
      case 'error': {
        const code = String(f.code ?? 'error');
        const err = roomError(code, String(f.message ?? code), { key: f.key ?? null });
        if (typeof f.key === 'string' && this.#answer(f.key, err, null)) return;
        // Keyless: a refused subscription (the only keyless request) if one waits here.
        if (f.key == null && conn.subscribes.length) {
          for (const w of conn.subscribes.shift()) if (this.#subscribers.delete(w)) w.reject(err);
          return;
        }
        if (conn === this.#conn) this.#emit('error', { type: 'error', code, message: err.message, key: err.key });
        return;
      }
      case 'subscribed':
        for (const w of conn.subscribes.shift() ?? []) if (this.#subscribers.delete(w)) w.resolve();
        return;
      case 'events':
        if (conn !== this.#conn || !Array.isArray(f.events)) return;
        for (const ev of f.events) if (this.#view.apply(ev)) this.#announce(ev);
        return;
      default:
    }
  }

  /** The state after a welcome; the difference to the state before as events (not after the first). */
  #resync(state, emit) {
    for (const ev of this.#view.resync(state)) if (emit && this.#wanted(ev)) this.#announce(ev, { resync: true });
  }

  /** Whether the lazy subscription lets `ev` through (for the events the SDK makes up). */
  #wanted(ev) {
    const s = this.#subscription;
    if (!s) return true;
    if (Array.isArray(s.events) && !s.events.includes(ev.type)) return false;
    return !(ev.type === 'register' && Array.isArray(s.participants) && !s.participants.includes(ev.participant));
  }

  /** A server event to the listeners, with the time it arrived. */
  #announce(ev, extra = {}) {
    const payload = { ...ev, ...extra, at: clock() };
    if (ev.type === 'chat') payload.sentAt = ev.at;
    this.#emit(ev.type, payload);
  }

  // ---- commands ------------------------------------------------------------------------------

  #nextKey() {
    this.#keys += 1;
    return `${this.#keySeed}-${this.#keys}`;
  }

  /** A command waiting for its answer; `once` (a join): tied to its socket, never sent again. */
  #command(frame, once) {
    return new Promise((resolve, reject) => {
      const entry = { key: frame.key, frame, resolve, reject, once, conn: null };
      this.#pending.push(entry);
      if (once || this.#ready) this.#transmit(entry);
    });
  }

  #transmit(entry) {
    const conn = this.#conn;
    if (conn?.send(entry.frame)) entry.conn = conn;
  }

  /** The oldest sent command with `key` settles; false if none waits. */
  #answer(key, err, receipt) {
    const entry = this.#pending.find((e) => e.key === key && e.conn !== null);
    if (!entry) return false;
    this.#settle(entry, err, receipt);
    return true;
  }

  #settle(entry, err, receipt) {
    const i = this.#pending.indexOf(entry);
    if (i < 0) return;
    this.#pending.splice(i, 1);
    if (err) entry.reject(err);
    else entry.resolve(receipt);
  }

  #drop(key) {
    const entry = this.#pending.find((e) => e.key === key);
    if (entry) this.#pending.splice(this.#pending.indexOf(entry), 1);
  }

  // ---- the end -------------------------------------------------------------------------------

  #ended() {
    return this.#state === 'left' || this.#state === 'closed' || this.#state === 'failed';
  }

  #fail(err) {
    this.#emit('error', { type: 'error', code: err.code ?? 'failed', message: err.message });
    this.#finish('failed', err);
  }

  #finish(state, err) {
    this.#state = state;
    this.#ready = false;
    clearTimeout(this.#timer);
    this.#wake?.();
    this.#conn = null;
    for (const conn of this.#conns) conn.close();
    this.#conns.clear();
    for (const entry of this.#pending.splice(0)) entry.reject(err);
    for (const w of this.#subscribers) w.reject(err);
    this.#subscribers.clear();
    // A listener of a session may throw; the room still ends.
    for (const s of this.#sessions) Promise.resolve().then(() => s.close()).catch(report);
    this.#sessions.clear();
    this.#published.clear();
  }

  #emit(name, payload) {
    const event = { ...payload, at: payload.at ?? clock() };
    for (const fn of [...(this.#listeners.get(name) ?? [])]) {
      try {
        fn(event);
      } catch (err) {
        report(err);
      }
    }
  }
}

/**
 * Joins `room` for `client` (see {@link FerryClient#join}).
 * @returns {Promise<Room>}
 */
export function joinRoom(client, settings, room, opts) {
  try {
    return start(new Room(client, settings, room, opts));
  } catch (err) {
    return Promise.reject(err);
  }
}
