// A room's state as a participant sees it (docs/rooms.md, `STATE` and `EVENT`): the pure core of
// room.js. Server events go in (`apply`), a welcome's state is turned into the events that lead
// there (`resync`); no socket, no clock.

/** Registers of the protocol → fields of a participant's state (`attribute` has its own map). */
const REGISTERS = { audio_muted: 'audioMuted', video_muted: 'videoMuted', hand_raised: 'handRaised', layout: 'layout' };

/** A JSON object (not an array, not null). */
export const isObject = (v) => typeof v === 'object' && v !== null && !Array.isArray(v);
const same = (a, b) => a === b || JSON.stringify(a) === JSON.stringify(b);

/** A participant's state before any register was written. */
export function blank() {
  return {
    name: null,
    metadata: '',
    audioMuted: false,
    videoMuted: false,
    handRaised: false,
    layout: null,
    attributes: {},
    tracks: new Map(),
  };
}

/**
 * The events (in the server's form) that take the local state — `participants`, the chat stamps
 * seen, `reactions` — to a welcome's `state`: left, joined (new, or a new name/metadata),
 * register, unpublished, published, chat not seen before, reactions.
 * @param {Map<string, object>} participants
 * @param {Set<string>} stamps
 * @param {number} reactions
 * @param {object} state the welcome's `state`
 * @returns {object[]}
 */
export function resyncEvents(participants, stamps, reactions, state) {
  const out = [];
  const remote = isObject(state?.participants) ? state.participants : {};
  for (const id of participants.keys()) {
    if (!Object.hasOwn(remote, id)) out.push({ type: 'left', participant: id });
  }
  for (const [id, p] of Object.entries(remote)) {
    if (!isObject(p)) continue;
    const mine = participants.get(id);
    const name = p.name ?? null;
    const metadata = p.metadata ?? '';
    if (!mine || mine.name !== name || !same(mine.metadata, metadata)) {
      out.push({ type: 'joined', participant: id, name, metadata });
    }
    const base = mine ?? blank();
    for (const [register, field] of Object.entries(REGISTERS)) {
      const value = register === 'layout' ? (p.layout ?? null) : p[register] === true;
      if (base[field] !== value) out.push({ type: 'register', participant: id, register, value });
    }
    const attributes = isObject(p.attributes) ? p.attributes : {};
    for (const name of new Set([...Object.keys(base.attributes), ...Object.keys(attributes)])) {
      const value = attributes[name] ?? null;
      if (!same(base.attributes[name] ?? null, value)) {
        out.push({ type: 'register', participant: id, register: 'attribute', name, value });
      }
    }
    const tracks = isObject(p.tracks) ? p.tracks : {};
    for (const track of base.tracks.keys()) {
      if (!Object.hasOwn(tracks, track)) out.push({ type: 'unpublished', participant: id, track });
    }
    for (const [track, t] of Object.entries(tracks)) {
      if (!isObject(t)) continue;
      const had = base.tracks.get(track);
      if (!had || had.stream !== t.stream || had.kind !== t.kind) {
        out.push({ type: 'published', participant: id, track, stream: t.stream, kind: t.kind });
      }
    }
  }
  for (const m of Array.isArray(state?.chat) ? state.chat : []) {
    if (!isObject(m) || stamps.has(m.stamp)) continue;
    out.push({ type: 'chat', participant: m.participant, text: m.text, stamp: m.stamp, at: m.at });
  }
  if (typeof state?.reactions === 'number' && state.reactions !== reactions) {
    out.push({ type: 'reactions', total: state.reactions });
  }
  return out;
}

/** Participants, chat and reactions, kept from the server's events. */
export class RoomView {
  constructor() {
    /** @type {Map<string, ReturnType<typeof blank>>} */
    this.participants = new Map();
    /** @type {{ participant: string, text: string, stamp: string, at: number }[]} */
    this.chat = [];
    /** The stamps of the chat messages held. */
    this.stamps = new Set();
    this.reactions = 0;
  }

  /**
   * Applies one server event.
   * @returns {boolean} false when it is to be dropped: not an event, or a chat message already held
   */
  apply(ev) {
    if (!isObject(ev) || typeof ev.type !== 'string') return false;
    const p = this.participants.get(ev.participant);
    switch (ev.type) {
      case 'joined': {
        if (typeof ev.participant !== 'string') return false;
        // A refresh (a rejoin after a reconnect) keeps the registers.
        const q = p ?? blank();
        q.name = ev.name ?? null;
        q.metadata = ev.metadata ?? '';
        this.participants.set(ev.participant, q);
        return true;
      }
      case 'left':
        this.participants.delete(ev.participant);
        return true;
      case 'register':
        // Someone the room does not know (a lazy subscription without `joined`): only told.
        if (!p) return true;
        if (ev.register === 'attribute') {
          if (typeof ev.name !== 'string') return false;
          if (ev.value == null) delete p.attributes[ev.name];
          else p.attributes[ev.name] = ev.value;
        } else if (Object.hasOwn(REGISTERS, ev.register)) {
          p[REGISTERS[ev.register]] = ev.value ?? (ev.register === 'layout' ? null : false);
        }
        return true;
      case 'published':
        p?.tracks.set(ev.track, { stream: ev.stream, kind: ev.kind });
        return true;
      case 'unpublished':
        p?.tracks.delete(ev.track);
        return true;
      case 'chat':
        if (ev.stamp != null && this.stamps.has(ev.stamp)) return false;
        if (ev.stamp != null) this.stamps.add(ev.stamp);
        this.chat.push({ participant: ev.participant, text: ev.text, stamp: ev.stamp, at: ev.at });
        return true;
      case 'reactions':
        if (typeof ev.total === 'number') this.reactions = ev.total;
        return true;
      default:
        // A type of a newer server: passed on as it is.
        return true;
    }
  }

  /**
   * Takes the state to a welcome's `state`.
   * @returns {object[]} the events that did it, in the server's form, to emit
   */
  resync(state) {
    const events = resyncEvents(this.participants, this.stamps, this.reactions, state);
    return events.filter((ev) => this.apply(ev));
  }
}
