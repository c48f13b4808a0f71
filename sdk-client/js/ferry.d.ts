// Types of Ferry's browser SDK (ferry.js, room.js) and its state machine (fsm.js). See docs/sdk.md.

/** Publish (WHIP) or play (WHEP). */
export type Kind = 'publish' | 'play';

/** Where a session is. */
export type State =
  | 'idle'
  | 'connecting'
  | 'connected'
  | 'migrating'
  | 'reconnecting'
  | 'degraded'
  | 'closed'
  | 'failed';

/** How a session moved (or recovered). */
export type Mode = 'edge' | 'ice-restart' | 'reconnect';

/** Timings (ms) and thresholds of the state machine; every field is optional in overrides. */
export interface Config {
  /** First retry delay (100). */
  backoffBase: number;
  /** Largest retry delay (5000). */
  backoffCap: number;
  /** A first connection must be up within this (10000). */
  connectTimeout: number;
  /** A switch (migration, ICE restart, reconnect) must carry media within this (2000). */
  switchTimeout: number;
  /** After a loss, the ICE restart at the same URL must work within this (1000). */
  restartTimeout: number;
  /** Attempts after a loss before giving up (12). */
  maxAttempts: number;
  /** Frames around a switch are watched this long after the first new one (500). */
  settle: number;
  /** An edge migration's blackout window starts this much before its event (1000). */
  edgeLookback: number;
  /** Below this (bit/s) video does not fit (150000). */
  minVideoBps: number;
  /** Above this loss fraction the network cannot carry video (0.15). */
  maxLoss: number;
  /** Consecutive bad samples before degrading (3). */
  badSamples: number;
  /** How long video stays off before it is tried again (10000; doubles when it fails again soon). */
  probeAfter: number;
}

/** The machine's defaults. */
export const DEFAULT_CONFIG: Readonly<Config>;

/** Options of {@link FerryClient}. */
export interface ClientOptions {
  /** The gateway (the scheduler or any node), e.g. `http://127.0.0.1:8080`. */
  baseUrl: string;
  /** Sent as `Authorization: Bearer …` with every request but the event stream. */
  token?: string;
}

/** Options common to publish and play. */
export interface SessionOptions {
  /** Resume the session whose ticket is in `sessionStorage` (`ferry:ticket:{kind}:{stream}`); default true. */
  resume?: boolean;
  /** Where the first offer goes (a node's WHIP/WHEP endpoint), instead of the gateway's; every
   *  later one (a recovery) goes through the gateway (`baseUrl`). */
  endpoint?: string;
  /** Overrides of the machine's {@link Config}. */
  config?: Partial<Config>;
  /** ICE servers of the peer connections. */
  iceServers?: RTCIceServer[];
  /** Use the gateway's TURN relays (`POST /v1/turn/credentials`: a primary and two backups
   *  with a coturn REST credential) besides direct paths. */
  turn?: boolean;
  /** Only relayed paths (`iceTransportPolicy: 'relay'`, through the gateway's TURN relays):
   *  for networks that block UDP to the nodes. */
  relayOnly?: boolean;
  /** Who the relays are for (the same user gets the same relays); default: a random id per
   *  session. */
  user?: string;
}

/** One simulcast encoding: the browser's parameters, with a rid (`[A-Za-z0-9_-]{1,16}`). */
export interface SimulcastEncoding extends RTCRtpEncodingParameters {
  rid: string;
}

/** What `simulcast: true` sends: rids q (¼ size, ≤ 150 kbit/s), h (½, ≤ 500 kbit/s), f (full, ≤ 1.5 Mbit/s). */
export const SIMULCAST: ReadonlyArray<Readonly<SimulcastEncoding>>;

/** Options of {@link FerryClient.publish}. */
export interface PublishOptions extends SessionOptions {
  /** The video codec to prefer. */
  codec?: 'vp8' | 'h264' | 'vp9' | 'av1';
  /**
   * Send the video in several encodings (`true`: {@link SIMULCAST}; or two or more of your own,
   * lowest first by convention, each with a distinct rid). The node forwards each viewer the one
   * its link and caps allow, and says which ones no viewer can use (dynacast): the SDK turns
   * those off (`active: false`) so the browser stops encoding them, and back on when wanted.
   */
  simulcast?: boolean | SimulcastEncoding[];
}

/**
 * A player's caps ({@link Session.setQuality}): the node never sends it more, whatever its link
 * carries. All absent is automatic (the node's estimate decides).
 */
export interface Quality {
  /** The highest picture (pixels): the highest simulcast layer at most this high, else the lowest (1–16384). */
  maxHeight?: number;
  /** The widest picture (pixels), likewise (1–16384). */
  maxWidth?: number;
  /** Frames per second (1–240; where the source has temporal layers). */
  maxFps?: number;
  /** Bit/s the node may send it (10000–1000000000). */
  maxBitrate?: number;
}

/**
 * Caps as the node takes them: the fields given (null/undefined ones left out); `null` is `{}`.
 * Throws a TypeError (unknown field, not an integer) or a RangeError (outside the node's range).
 */
export function normalizeQuality(caps: Quality | null | undefined): Quality;

/** Options of {@link FerryClient.play}. */
export interface PlayOptions extends SessionOptions {
  /** A video element kept showing {@link Session.stream} (and played again after each swap). */
  video?: HTMLVideoElement;
  /** Caps from the start ({@link Session.setQuality}), sent to the node with the first answer. */
  quality?: Quality | null;
}

/** `state`: the state changed. */
export interface StateEvent {
  event: 'state';
  state: State;
  previous: State;
  /** Why (failed, closed, reconnecting). */
  reason: string | null;
}

/** `migrated`: the session moved to another node and media flows there. */
export interface MigratedEvent {
  event: 'migrated';
  mode: Mode;
  from: string | null;
  to: string | null;
  /** Play: the largest gap between decoded frames around the switch; publish: how long no path worked. */
  blackoutMs: number;
  /** From the event to the first frame after it (play) or the new path working (publish). */
  firstFrameMs: number;
}

/** `reconnecting`: the transport was lost; an attempt follows after `delayMs`. */
export interface ReconnectingEvent {
  event: 'reconnecting';
  attempt: number;
  delayMs: number;
  reason: string;
}

/** `reconnected`: media flows again after a loss. */
export interface ReconnectedEvent {
  event: 'reconnected';
  downtimeMs: number;
  how: 'ice-restart' | 'reconnect';
  /** False when a refused ticket made a fresh session replace it. */
  resumed: boolean;
  node: string | null;
}

/** `degraded`: video went off (or back on) because of the network. */
export interface DegradedEvent {
  event: 'degraded';
  active: boolean;
  bps: number;
  loss: number;
}

/**
 * `dynacast` (publish, simulcast): the node said which encodings some consumer can use; the SDK
 * set the others inactive (the browser stops encoding them) and these active.
 */
export interface DynacastEvent {
  event: 'dynacast';
  encodings: { mid: string | null; rid: string; active: boolean }[];
}

/**
 * `error`: something went wrong. The machine's codes: `ticket-rejected`, `post-failed`,
 * `restart-failed`, `migration-timeout`, `gave-up`; the driver's: `set-video-failed`,
 * `set-quality-failed` (caps sent again after a move were refused or not answered),
 * `turn-unavailable` (no relays from the gateway), `relay-move-failed` (a move off a draining
 * relay did not work; the old path goes on while it can).
 */
export interface ErrorEvent {
  event: 'error';
  code: string;
  /** HTTP status, 0 if none. */
  status: number;
  message: string;
}

/**
 * `relay-moved`: a TURN relay the session used drains (the node said so); the transport moved by
 * an ICE restart onto fresh relays from the gateway, with DTLS and media going on.
 */
export interface RelayMovedEvent {
  event: 'relay-moved';
  /** The draining relays' URIs, as the node named them. */
  drained: string[];
  /** The relay (TURN URI as the browser reports it) of the path before, null if it was not relayed. */
  from: string | null;
  /** The relay of the path after, null if it is not relayed. */
  to: string | null;
  /** From the node's event to the new path working. */
  ms: number;
}

/** A digest of a session and its media ({@link Session.stats}, and the `stats` event every second). */
export interface Digest {
  state: State;
  session: string | null;
  node: string | null;
  location: string | null;
  /** The machine's number of the transport media flows on. */
  transport: number | null;
  /** The video codec's MIME type. */
  codec: string | null;
  /** Bit/s sent (publish) or received (play) over the last second. */
  bitrate: number | null;
  framesDecoded: number | null;
  framesSent: number | null;
  /** Play: packets lost on the way in; publish: as the server reports them. */
  packetsLost: number | null;
  freezeCount: number | null;
  /** Video as the machine wants it (false while degraded). */
  videoEnabled: boolean;
  /** Play: the app paused video ({@link Session.pauseVideo}). */
  videoPaused: boolean;
  /** Play: the caps asked for last (`{}`: automatic), null if never. */
  quality: Quality | null;
  /** Publish: the rids the node said no consumer can use (dynacast), turned off. */
  inactiveEncodings: string[];
  /** The last `migrated` event. */
  migrated: MigratedEvent | null;
  migrations: number;
  reconnects: number;
}

/** `stats`: the digest, every second. */
export interface StatsEvent extends Digest {
  event: 'stats';
}

/** Events of a session, by name. */
export interface SessionEvents {
  state: StateEvent;
  migrated: MigratedEvent;
  reconnecting: ReconnectingEvent;
  reconnected: ReconnectedEvent;
  degraded: DegradedEvent;
  'relay-moved': RelayMovedEvent;
  dynacast: DynacastEvent;
  stats: StatsEvent;
  error: ErrorEvent;
}

/** A published or played stream, kept alive by the SDK. */
export interface Session {
  /** The session id (`Ferry-Session`). */
  readonly id: string | null;
  readonly state: State;
  /** The connection media flows on (it changes on `reconnect` migrations and recoveries). */
  readonly pc: RTCPeerConnection | null;
  /** Play: one stable stream whose tracks are swapped with the transport; publish: the published one. */
  readonly stream: MediaStream;
  /** The node serving the session. */
  readonly node: string | null;
  /** The session's URL on that node. */
  readonly location: string | null;
  on<E extends keyof SessionEvents>(event: E, fn: (payload: SessionEvents[E]) => void): this;
  off<E extends keyof SessionEvents>(event: E, fn: (payload: SessionEvents[E]) => void): this;
  /** A digest of the session and its media now. */
  stats(): Promise<Digest>;
  /**
   * Play: caps what the node sends this viewer (`{}`/`null`: automatic again). `POST` to the
   * session's layer URL (the answer's `Link` rel `urn:ietf:params:whep:ext:core:layer`, else
   * `{location}/layer`); sent again to the node serving the session after every move or
   * recovery. Resolves once the node took them; rejects with an Error whose `status` is the
   * HTTP status (0: no answer), or at once with a TypeError/RangeError on a bad value or a
   * publisher.
   */
  setQuality(caps: Quality | null): Promise<void>;
  /** Play: the caps asked for last (`{}`: automatic), null if never. */
  readonly quality: Quality | null;
  /** Play: the node stops forwarding video (audio goes on), kept across moves; `POST {location}/video`. */
  pauseVideo(): Promise<void>;
  /** Play: video again, from the next keyframe. */
  resumeVideo(): Promise<void>;
  /** Play: whether the app paused video. */
  readonly videoPaused: boolean;
  /** Ends the session (DELETE) and forgets its ticket; settles once the DELETE was answered or failed. */
  close(): Promise<void>;
  /** The session's events so far (not `stats`), oldest first, the last 200: also those from
   *  before `publish()`/`play()` resolved (a refused ticket, retries). */
  readonly history: ReadonlyArray<Exclude<SessionEvents[keyof SessionEvents], StatsEvent> & { at: number }>;
}

/** The error a publish or play promise rejects with when the session ends before it connected. */
export interface SessionError extends Error {
  reason: string | null;
  state: 'failed' | 'closed';
}

/** Publishes and plays streams of one Ferry cluster. */
export class FerryClient {
  constructor(options: ClientOptions);
  /** The gateway's URL, without a trailing slash. */
  readonly baseUrl: string;
  /** Publishes `mediaStream` as `stream`; resolves once first connected. */
  publish(stream: string, mediaStream: MediaStream, opts?: PublishOptions): Promise<Session>;
  /** Plays `stream`; resolves once first connected. */
  play(stream: string, opts?: PlayOptions): Promise<Session>;
  /**
   * Joins `room` (`[A-Za-z0-9._-]{1,64}`): `POST {baseUrl}/v1/rooms/{room}/join`, the WebSocket it
   * names, the node's welcome, a `join` command; resolves once it is acknowledged. Rejects with a
   * {@link RoomError}: the node's code, `join-refused` (with `status`), `timeout` (10 s), `closed`.
   */
  join(room: string, opts?: JoinOptions): Promise<Room>;
}

// ---- rooms (room.js, docs/rooms.md) ------------------------------------------------------------

/** Options of {@link FerryClient.join}. */
export interface JoinOptions {
  /** Shown to the others; default: the participant id. */
  name?: string;
  /** The id to join as (`[A-Za-z0-9._-]{1,64}`); default: the gateway makes one. */
  participant?: string;
  /** Free-form, shown to the others. */
  metadata?: string;
  /** For runtimes without a global one (Node: the `ws` package) and tests. */
  WebSocket?: { new (url: string): WebSocket };
  /** For runtimes without a global one and tests. */
  fetch?: typeof fetch;
}

/** A room's state: where its WebSocket is. */
export type RoomState = 'joining' | 'joined' | 'reconnecting' | 'left' | 'closed' | 'failed';

/** A register of the protocol. */
export type Register = 'audio_muted' | 'video_muted' | 'hand_raised' | 'layout' | 'attribute';

/** A room layout. */
export type Layout = 'grid' | 'speaker' | 'sidebar';

/** The server's event types (also the `events` of a lazy subscription). */
export type RoomEventType = 'joined' | 'left' | 'register' | 'published' | 'unpublished' | 'chat' | 'reactions';

/** A participant as the room knows it. */
export interface Participant {
  name: string | null;
  metadata: string;
  audioMuted: boolean;
  videoMuted: boolean;
  handRaised: boolean;
  layout: Layout | null;
  attributes: Record<string, string>;
  /** Published tracks by track id. */
  tracks: Map<string, { stream: string; kind: string }>;
}

/** A chat message (the server's form; `at`: its wall-clock ms, from its stamp). */
export interface ChatMessage {
  participant: string;
  text: string;
  stamp: string;
  at: number;
}

/** What every room event carries. */
interface RoomEventBase {
  /** `performance.now()` when it reached the app (`Date.now()` without `performance`). */
  at: number;
  /** Set on the events found by diffing a welcome against the state after a reconnect or a move. */
  resync?: true;
}

export interface JoinedEvent extends RoomEventBase {
  type: 'joined';
  participant: string;
  name: string | null;
  metadata: string;
}

export interface LeftEvent extends RoomEventBase {
  type: 'left';
  participant: string;
}

/** A register changed; `name` for `attribute` (whose `value: null` is a delete). */
export interface RegisterEvent extends RoomEventBase {
  type: 'register';
  participant: string;
  register: Register;
  name?: string;
  value: boolean | string | null;
}

export interface PublishedEvent extends RoomEventBase {
  type: 'published';
  participant: string;
  track: string;
  stream: string;
  kind: string;
}

export interface UnpublishedEvent extends RoomEventBase {
  type: 'unpublished';
  participant: string;
  track: string;
}

/** A chat message; its own time (the server's `at`) is `sentAt`. */
export interface ChatEvent extends RoomEventBase {
  type: 'chat';
  participant: string;
  text: string;
  stamp: string;
  sentAt: number;
}

export interface ReactionsEvent extends RoomEventBase {
  type: 'reactions';
  total: number;
}

/** The room is joined on `node` (after the first join, a reconnect or a move). */
export interface RoomConnectedEvent extends RoomEventBase {
  type: 'connected';
  node: string | null;
}

/** The socket dropped; attempt `attempt` (through the gateway) follows after `delayMs`. */
export interface RoomReconnectingEvent extends RoomEventBase {
  type: 'reconnecting';
  reason: string;
  attempt: number;
  delayMs: number;
}

/** The socket moved with a migrated session (make before break). */
export interface MovedEvent extends RoomEventBase {
  type: 'moved';
  from: string | null;
  to: string | null;
}

/**
 * `error`: an error frame no command waits for (with its `key`, if any), `move-failed` (the old
 * socket goes on), or what ended the room when it gives up (`join-refused`, the node's code).
 */
export interface RoomErrorEvent extends RoomEventBase {
  type: 'error';
  code: string;
  message: string;
  key?: string | null;
}

/** Events of a room, by name. */
export interface RoomEvents {
  joined: JoinedEvent;
  left: LeftEvent;
  register: RegisterEvent;
  published: PublishedEvent;
  unpublished: UnpublishedEvent;
  chat: ChatEvent;
  reactions: ReactionsEvent;
  connected: RoomConnectedEvent;
  reconnecting: RoomReconnectingEvent;
  moved: MovedEvent;
  error: RoomErrorEvent;
}

/** What a command resolves with: the node's receipt. */
export interface Receipt {
  key: string;
  /** True when the key had been seen: the first result, nothing changed. */
  duplicate: boolean;
  stamp: string | null;
}

/** A refused command or join: the node's `code` (`not_in_room`, `bad_value`, …) or the SDK's. */
export interface RoomError extends Error {
  code: string;
  key?: string | null;
  status?: number;
}

/** Options of {@link Room.publish}; the rest goes to {@link FerryClient.publish}. */
export interface RoomPublishOptions extends Omit<PublishOptions, 'endpoint'> {
  /** The track id (default `cam`); the stream is `{room}.{participant}.{track}`. */
  track?: string;
  /** Announced with the track (default `video`). */
  kind?: string;
}

/** A joined room: its state kept up to date, commands, media. Made by {@link FerryClient.join}. */
export class Room {
  private constructor();
  /** The room id. */
  readonly name: string;
  /** This participant's id. */
  readonly participant: string;
  /** The node the WebSocket is on. */
  readonly node: string | null;
  readonly state: RoomState;
  /** By id, this participant included. */
  readonly participants: ReadonlyMap<string, Readonly<Participant>>;
  /** In the order the room learned of the messages. */
  readonly chat: ReadonlyArray<ChatMessage>;
  readonly reactions: number;
  on<E extends keyof RoomEvents>(event: E, fn: (payload: RoomEvents[E]) => void): this;
  off<E extends keyof RoomEvents>(event: E, fn: (payload: RoomEvents[E]) => void): this;
  /** Any command frame; `key` is filled in when missing. Sent again (same key) after a reconnect until answered. */
  send(frame: { type: string; key?: string; [field: string]: unknown }): Promise<Receipt>;
  setMuted(kind: 'audio' | 'video', muted: boolean): Promise<Receipt>;
  raiseHand(raised?: boolean): Promise<Receipt>;
  setLayout(layout: Layout): Promise<Receipt>;
  /** One `set` per key; `null` deletes. */
  setAttributes(attributes: Record<string, string | null>): Promise<Receipt[]>;
  sendChat(text: string): Promise<Receipt>;
  /** ±1..1000 (default 1). */
  react(delta?: number): Promise<Receipt>;
  /** Lazy subscription (`null`: all); kept across reconnects; resolves on `subscribed`. */
  subscribeEvents(which?: { events?: RoomEventType[] | null; participants?: string[] | null }): Promise<void>;
  /** Leaves, then closes the socket and the room's sessions. */
  leave(): Promise<Receipt>;
  /** Closes without leaving (the node keeps the participant for its 10 s grace period). */
  close(): void;
  /** Publishes on the room's node (WHIP) and announces the track; the socket follows the session's migrations. */
  publish(mediaStream: MediaStream, opts?: RoomPublishOptions): Promise<Session>;
  /** Withdraws a track and closes its session. */
  unpublish(track?: string): Promise<Receipt>;
  /** Plays a participant's track (WHEP). */
  subscribe(participant: string, track?: string, opts?: PlayOptions): Promise<Session>;
}

/** An input of the state machine (the Rust `Input`'s serde form). */
export type Input =
  | { type: 'start'; ticket?: string | null }
  | { type: 'answered'; transport: number; location: string; session: string; node?: string | null; ticket?: string | null }
  | { type: 'post-failed'; transport: number; status: number; reason: string }
  | { type: 'connected'; transport: number }
  | { type: 'lost'; transport: number; cause: 'ice' | 'node-unreachable' | 'stalled' }
  | { type: 'migrate'; mode: Mode; from?: string | null; target: string; location: string; ticket?: string | null }
  | { type: 'restart-answered'; transport: number }
  | { type: 'restart-failed'; transport: number; status: number; reason: string }
  | { type: 'frames'; transport: number; total: number }
  | { type: 'throughput'; bps: number; loss: number }
  | { type: 'ticket'; ticket: string }
  | { type: 'ended'; reason: string }
  | { type: 'close' };

/** Where a POST goes. */
export type Endpoint = { to: 'gateway' } | { to: 'url'; url: string };

/** A command of the state machine (the Rust `Command`'s serde form). */
export type Command =
  | { type: 'post'; transport: number; endpoint: Endpoint; idempotency_key: string; ticket: string | null; failed_node: string | null }
  | { type: 'restart-ice'; transport: number; location: string }
  | { type: 'adopt'; transport: number }
  | { type: 'close-transport'; transport: number }
  | { type: 'subscribe'; location: string }
  | { type: 'delete'; location: string }
  | { type: 'set-video'; enabled: boolean }
  | { type: 'store-ticket'; ticket: string | null }
  | ({ type: 'emit' } & (StateEvent | MigratedEvent | ReconnectingEvent | ReconnectedEvent | DegradedEvent | ErrorEvent));

/** The sans-IO session state machine (fsm.js), shared with the Rust SDK. Times are milliseconds. */
export class Machine {
  constructor(kind: Kind, config?: Partial<Config>, seed?: number, keySeed?: string);
  readonly kind: Kind;
  readonly state: State;
  readonly location: string | null;
  readonly session: string | null;
  readonly node: string | null;
  readonly currentTransport: number | null;
  readonly ticket: string | null;
  handleInput(now: number, input: Input): void;
  handleTimeout(now: number): void;
  pollCommand(): Command | null;
  pollTimeout(): number | null;
  /** Delay (ms) before attempt `n` (1-based), with jitter. */
  backoff(n: number): number;
}
