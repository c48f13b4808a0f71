// Types of Ferry's browser SDK (ferry.js) and its state machine (fsm.js). See docs/sdk.md.

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

/** Options of {@link FerryClient.publish}. */
export interface PublishOptions extends SessionOptions {
  /** The video codec to prefer. */
  codec?: 'vp8' | 'h264';
}

/** Options of {@link FerryClient.play}. */
export interface PlayOptions extends SessionOptions {
  /** A video element kept showing {@link Session.stream} (and played again after each swap). */
  video?: HTMLVideoElement;
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
 * `error`: something went wrong. The machine's codes: `ticket-rejected`, `post-failed`,
 * `restart-failed`, `migration-timeout`, `gave-up`; the driver's: `set-video-failed`,
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
  videoEnabled: boolean;
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
