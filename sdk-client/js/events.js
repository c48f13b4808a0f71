// A session's server-sent events (`GET {location}/events`) as machine inputs, and the liveness
// probe of the node serving it (`GET {node}/healthz`). See docs/sdk.md.

import { fetchWithin } from './transport.js';

/** The node probe gets this long. */
export const PROBE_TIMEOUT = 500;

const MODES = new Set(['edge', 'ice-restart', 'reconnect']);

const parse = (data) => {
  try {
    return JSON.parse(data);
  } catch {
    return null;
  }
};

const text = (v) => (typeof v === 'string' && v !== '' ? v : null);

/**
 * A `migrate` event's data as the machine's `migrate` input (the fields of the Rust
 * `MigrateEvent`), or null when it is not one. A relative `location` is resolved against `base`.
 */
export function migrateInput(data, base) {
  const m = parse(data);
  if (!m || !MODES.has(m.mode) || !text(m.target) || !text(m.location)) return null;
  let location;
  try {
    location = new URL(m.location, base).href;
  } catch {
    return null;
  }
  return { type: 'migrate', mode: m.mode, from: text(m.from), target: m.target, location, ticket: text(m.ticket) };
}

/** A `turn-drain` event's relay URIs (`{"relays": ["turn:…", …]}`); empty when it is not one. */
export function turnDrainRelays(data) {
  const relays = parse(data)?.relays;
  return Array.isArray(relays) ? relays.filter((r) => text(r) !== null) : [];
}

/**
 * An `active` event's encodings (dynacast: `{"encodings": [{"mid", "rid", "active"}, …]}`), the
 * well-formed ones; empty when it is not one.
 */
export function activeEncodings(data) {
  const list = parse(data)?.encodings;
  if (!Array.isArray(list)) return [];
  return list
    .filter((e) => text(e?.rid) !== null && typeof e.active === 'boolean')
    .map((e) => ({ mid: text(e.mid), rid: e.rid, active: e.active }));
}

/**
 * Follows the events at `location`: `migrate`, `ticket` and `end` become machine inputs passed to
 * `feed`, `turn-drain` calls `onTurnDrain` with the draining relays' URIs, `active` (a
 * publisher's dynacast) calls `onActive` with the encodings; the first `error` closes the stream
 * (no EventSource auto-reconnect) and calls `onError`. `onOpen` is called when the stream is up.
 */
export class Subscription {
  /**
   * @param {string} location the session's URL
   * @param {{ feed: (input: object) => void, onError: () => void, onOpen?: () => void,
   *   onTurnDrain?: (relays: string[]) => void,
   *   onActive?: (encodings: { mid: string|null, rid: string, active: boolean }[]) => void }} handlers
   */
  constructor(location, { feed, onError, onOpen, onTurnDrain, onActive }) {
    this.location = location;
    this.closed = false;
    const url = `${location}/events`;
    this.source = new EventSource(url);
    const on = (name, fn) =>
      this.source.addEventListener(name, (e) => {
        if (!this.closed) fn(e);
      });
    on('open', () => onOpen?.());
    on('migrate', (e) => {
      const input = migrateInput(e.data, url);
      if (input) feed(input);
    });
    on('ticket', (e) => {
      const ticket = text(parse(e.data)?.ticket);
      if (ticket) feed({ type: 'ticket', ticket });
    });
    on('turn-drain', (e) => {
      const relays = turnDrainRelays(e.data);
      if (relays.length) onTurnDrain?.(relays);
    });
    on('active', (e) => {
      const encodings = activeEncodings(e.data);
      if (encodings.length) onActive?.(encodings);
    });
    on('end', (e) => {
      const reason = parse(e.data)?.reason;
      feed({ type: 'ended', reason: typeof reason === 'string' ? reason : 'ended by the server' });
    });
    on('error', () => {
      this.close();
      onError();
    });
  }

  /** Stops following. */
  close() {
    if (this.closed) return;
    this.closed = true;
    this.source.close();
  }
}

/**
 * Whether the node serving `location` answers its health check within {@link PROBE_TIMEOUT}:
 * no answer, or a 5xx (a proxy for a dead node), is false.
 * @param {string} location
 * @returns {Promise<boolean>}
 */
export async function probeNode(location) {
  try {
    const { response } = await fetchWithin(new URL('/healthz', location).href, { cache: 'no-store' }, PROBE_TIMEOUT);
    return response.status < 500;
  } catch {
    return false;
  }
}
