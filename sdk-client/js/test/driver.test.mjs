// The driver (ferry.js) against fake browser APIs: RTCPeerConnection, fetch, EventSource,
// sessionStorage. It checks what goes on the wire and what the app sees; the real thing (headless
// Chromium against the cluster) is the end-to-end tests' job.

import { test, beforeEach, afterEach } from 'node:test';
import assert from 'node:assert/strict';

import { FerryClient, SIMULCAST, normalizeQuality } from '../ferry.js';
import { activeEncodings } from '../events.js';
import { linkTarget } from '../transport.js';

// ---- fakes -------------------------------------------------------------------------------------

class FakeTrack {
  constructor(kind) {
    this.kind = kind;
  }
}

class FakeMediaStream {
  constructor(tracks = []) {
    this.tracks = [...tracks];
  }

  getTracks() {
    return [...this.tracks];
  }

  addTrack(t) {
    if (!this.tracks.includes(t)) this.tracks.push(t);
  }

  removeTrack(t) {
    this.tracks = this.tracks.filter((x) => x !== t);
  }
}

class FakePC extends EventTarget {
  static all = [];

  constructor(config) {
    super();
    this.config = config;
    this.transceivers = [];
    this.connectionState = 'new';
    this.iceConnectionState = 'new';
    this.signalingState = 'stable';
    this.localDescription = null;
    this.remoteDescription = null;
    this.offers = 0;
    this.closed = false;
    this.framesDecoded = 0;
    this.pair = { id: 'CP1', address: '10.0.0.1', port: 4000, responses: 1 };
    this.outgoing = 2_000_000;
    this.packetsReceived = 10;
    this.packetsLost = 0;
    FakePC.all.push(this);
  }

  addTransceiver(trackOrKind, init) {
    const kind = typeof trackOrKind === 'string' ? trackOrKind : trackOrKind.kind;
    const pc = this;
    const t = {
      mid: String(this.transceivers.length),
      direction: init.direction,
      init,
      receiver: {
        track: new FakeTrack(kind),
        getStats: async () => new Map([['in', { type: 'inbound-rtp', kind, framesDecoded: pc.framesDecoded }]]),
      },
      sender: {
        track: typeof trackOrKind === 'string' ? null : trackOrKind,
        params: { encodings: init.sendEncodings?.map((e) => ({ active: true, ...e })) ?? [{ active: true }] },
        sets: 0,
        getParameters() {
          return structuredClone(this.params);
        },
        async setParameters(p) {
          this.sets += 1;
          this.params = p;
        },
      },
      setCodecPreferences(codecs) {
        this.preferences = codecs;
      },
    };
    this.transceivers.push(t);
    return t;
  }

  getTransceivers() {
    return this.transceivers;
  }

  async createOffer() {
    this.offers += 1;
    return { type: 'offer', sdp: `v=0\r\na=ice-ufrag:u${this.offers}\r\na=ice-pwd:p${this.offers}\r\n` };
  }

  async setLocalDescription(d) {
    if (d.type === 'rollback') {
      this.signalingState = 'stable';
      return;
    }
    this.localDescription = d;
    this.signalingState = 'have-local-offer';
  }

  async setRemoteDescription(d) {
    this.remoteDescription = d;
    this.signalingState = 'stable';
  }

  restartIce() {
    this.restarted = true;
  }

  getConfiguration() {
    return { ...this.config };
  }

  setConfiguration(config) {
    this.config = { ...config };
  }

  async getStats() {
    const { id, address, port, responses } = this.pair;
    return new Map([
      ['T', { id: 'T', type: 'transport', selectedCandidatePairId: id }],
      [id, { id, type: 'candidate-pair', state: 'succeeded', remoteCandidateId: 'R', responsesReceived: responses, availableOutgoingBitrate: this.outgoing }],
      ['R', { id: 'R', type: 'remote-candidate', address, port }],
      ['V', { id: 'V', type: 'inbound-rtp', kind: 'video', framesDecoded: this.framesDecoded, bytesReceived: 1000, packetsReceived: this.packetsReceived, packetsLost: this.packetsLost }],
    ]);
  }

  close() {
    this.closed = true;
    this.connectionState = 'closed';
  }

  set(state, ice = this.iceConnectionState) {
    this.connectionState = state;
    this.iceConnectionState = ice;
    this.dispatchEvent(new Event('connectionstatechange'));
    this.dispatchEvent(new Event('iceconnectionstatechange'));
  }
}

class FakeEventSource extends EventTarget {
  static all = [];

  constructor(url) {
    super();
    this.url = url;
    this.closed = false;
    FakeEventSource.all.push(this);
  }

  send(name, data) {
    this.dispatchEvent(new MessageEvent(name, { data: JSON.stringify(data) }));
  }

  fail() {
    this.dispatchEvent(new Event('error'));
  }

  close() {
    this.closed = true;
  }
}

/** Requests in order; `route(url, init)` answers each (a Response, or throws for "no answer"). */
const requests = [];
let route = () => new Response('no route', { status: 500 });
let reported = [];

function respond(status, body = '', headers = {}, url = undefined) {
  const r = new Response(status === 204 ? null : body, { status, headers });
  if (url) Object.defineProperty(r, 'url', { value: url });
  return r;
}

const store = new Map();
globalThis.RTCPeerConnection = FakePC;
globalThis.RTCRtpSender = {
  getCapabilities: () => ({
    codecs: [
      { mimeType: 'video/H264', sdpFmtpLine: 'packetization-mode=1;profile-level-id=42e01f' },
      { mimeType: 'video/VP8' },
      { mimeType: 'video/rtx' },
    ],
  }),
};
globalThis.MediaStream = FakeMediaStream;
globalThis.EventSource = FakeEventSource;
globalThis.sessionStorage = {
  getItem: (k) => store.get(k) ?? null,
  setItem: (k, v) => store.set(k, String(v)),
  removeItem: (k) => store.delete(k),
};
globalThis.fetch = async (url, init = {}) => {
  const req = { url: String(url), method: init.method ?? 'GET', headers: { ...init.headers }, body: init.body };
  requests.push(req);
  if (init.signal?.aborted) throw init.signal.reason;
  return route(req);
};
console.error = (e) => reported.push(e);

// Every session a test opened is closed after it, so a failed test leaves no timers behind.
const opened = new Set();
for (const method of ['play', 'publish']) {
  const original = FerryClient.prototype[method];
  FerryClient.prototype[method] = function (...args) {
    const p = original.apply(this, args);
    p.then((s) => opened.add(s), () => {});
    return p;
  };
}

afterEach(async () => {
  route = () => respond(200);
  await Promise.all([...opened].map((s) => s.close()));
  opened.clear();
});

beforeEach(() => {
  requests.length = 0;
  FakePC.all.length = 0;
  FakeEventSource.all.length = 0;
  store.clear();
  reported = [];
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(cond, what, ms = 3000) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

/** `promise`, or a failure after `ms`. */
function within(promise, what, ms = 3000) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

const posts = () => requests.filter((r) => r.method === 'POST');

const ANSWER = 'v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=ice-ufrag:sa\r\na=ice-pwd:sapwd\r\n' +
  'a=mid:0\r\na=candidate:1 1 udp 2130706431 10.0.0.1 4000 typ host\r\na=end-of-candidates\r\n';

const created = (node, session, ticket) => (req) =>
  respond(
    201,
    ANSWER,
    { Location: `/whep/cam/${session}`, 'Ferry-Session': session, 'Ferry-Node': node, 'Ferry-Ticket': ticket },
    `http://${node}${new URL(req.url).pathname}`,
  );

// ---- tests -------------------------------------------------------------------------------------

test('play: POST through the gateway, follow the answer, events, a reconnect migration, close', async () => {
  route = created('node-a', 's1', 't1');
  const client = new FerryClient({ baseUrl: 'http://gw/', token: 'secret' });
  const video = { srcObject: null, plays: 0, play() { this.plays += 1; return Promise.resolve(); } };
  const playing = client.play('cam', { video });
  await until(() => FakePC.all[0]?.remoteDescription, 'the answer');
  const [post] = posts();
  assert.equal(post.url, 'http://gw/whep/cam');
  assert.equal(post.headers['Content-Type'], 'application/sdp');
  assert.equal(post.headers.Authorization, 'Bearer secret');
  assert.match(post.headers['Idempotency-Key'], /-1$/);
  assert.equal(post.headers['Ferry-Ticket'], undefined);
  assert.equal(post.body, FakePC.all[0].localDescription.sdp);
  assert.deepEqual(FakePC.all[0].transceivers.map((t) => [t.receiver.track.kind, t.direction]), [
    ['audio', 'recvonly'],
    ['video', 'recvonly'],
  ]);
  assert.equal(store.get('ferry:ticket:play:cam'), 't1');

  const states = [];
  FakePC.all[0].set('connected', 'connected');
  const session = await within(playing, 'connected');
  session.on('state', (s) => states.push(s.state));
  session.on('state', () => {
    throw new Error('a broken listener');
  });
  assert.equal(session.state, 'connected');
  assert.equal(session.id, 's1');
  assert.equal(session.node, 'node-a');
  assert.equal(session.location, 'http://node-a/whep/cam/s1');
  assert.equal(session.pc, FakePC.all[0]);
  assert.equal(video.srcObject, session.stream);
  assert.deepEqual(session.stream.getTracks(), FakePC.all[0].transceivers.map((t) => t.receiver.track));
  const es = FakeEventSource.all.at(-1);
  assert.equal(es.url, 'http://node-a/whep/cam/s1/events');

  es.send('ticket', { ticket: 't2', expires: 1 });
  assert.equal(store.get('ferry:ticket:play:cam'), 't2');
  FakePC.all[0].framesDecoded = 30;
  await sleep(60);

  // A reconnect migration: a new transport POSTed to the target with the event's ticket.
  route = created('node-b', 's1', 't3');
  const migrated = new Promise((resolve) => session.on('migrated', resolve));
  es.send('migrate', {
    mode: 'reconnect', from: 'node-a', target: 'node-b', location: 'http://node-b/whep/cam', ticket: 'mig', epoch: 3,
  });
  await until(() => FakePC.all[1]?.remoteDescription, 'the second answer');
  const second = posts()[1];
  assert.equal(second.url, 'http://node-b/whep/cam');
  assert.equal(second.headers['Ferry-Ticket'], 'mig');
  assert.notEqual(second.headers['Idempotency-Key'], post.headers['Idempotency-Key']);
  assert.deepEqual(states, ['migrating']);
  assert.equal(session.pc, FakePC.all[0], 'the old transport plays until the new one has a frame');
  FakePC.all[1].framesDecoded = 1;
  await until(() => session.pc === FakePC.all[1], 'the switch');
  assert.ok(FakePC.all[0].closed);
  assert.deepEqual(session.stream.getTracks(), FakePC.all[1].transceivers.map((t) => t.receiver.track));
  assert.equal(video.srcObject, session.stream);
  assert.ok(video.plays >= 2, 'play() again after the swap');
  assert.equal(FakeEventSource.all.at(-1).url, 'http://node-b/whep/cam/s1/events');
  assert.ok(es.closed);
  const m = await within(migrated, 'migrated');
  assert.equal(m.event, 'migrated');
  assert.equal(m.mode, 'reconnect');
  assert.equal(m.to, 'node-b');
  assert.equal(store.get('ferry:ticket:play:cam'), 't3');
  assert.ok(reported.some((e) => String(e).includes('a broken listener')), 'listener errors are reported');

  route = () => respond(200);
  await session.close();
  const del = requests.at(-1);
  assert.deepEqual([del.method, del.url], ['DELETE', 'http://node-b/whep/cam/s1']);
  assert.equal(session.state, 'closed');
  assert.equal(store.has('ferry:ticket:play:cam'), false);
  assert.ok(FakePC.all[1].closed);
  assert.ok(FakeEventSource.all.at(-1).closed);
});

test('publish: a POST with no answer is sent again, same offer and key; a dead node is restarted', async () => {
  let first = true;
  route = (req) => {
    if (first) {
      first = false;
      throw new TypeError('network error');
    }
    return respond(201, ANSWER, { Location: 'http://node-a/whip/cam/p1', 'Ferry-Node': 'node-a' }, 'http://node-a/whip/cam');
  };
  store.set('ferry:ticket:publish:cam', 'saved');
  const media = new FakeMediaStream([new FakeTrack('audio'), new FakeTrack('video')]);
  const client = new FerryClient({ baseUrl: 'http://gw' });
  const publishing = client.publish('cam', media, { codec: 'vp8', config: { backoffBase: 10 } });
  await until(() => posts().length === 2, 'the retry');
  const [a, b] = posts();
  assert.equal(a.body, b.body);
  assert.equal(a.headers['Idempotency-Key'], b.headers['Idempotency-Key']);
  assert.equal(a.headers['Ferry-Ticket'], 'saved');
  assert.equal(FakePC.all.length, 1, 'one connection, one offer');
  const pc = FakePC.all[0];
  const video = pc.transceivers.find((t) => t.receiver.track.kind === 'video');
  assert.equal(video.preferences[0].mimeType, 'video/VP8');
  assert.ok(pc.transceivers.every((t) => t.direction === 'sendonly'));
  await until(() => pc.remoteDescription, 'the answer');
  pc.set('connected', 'connected');
  const session = await within(publishing, 'connected');
  assert.equal(session.id, 'p1', 'the id from the Location');
  assert.equal(store.has('ferry:ticket:publish:cam'), false, 'the spent ticket is forgotten');

  // The event stream drops and the node does not answer: an ICE restart at the same URL.
  const reconnected = new Promise((resolve) => session.on('reconnected', resolve));
  route = (req) => {
    if (req.url.endsWith('/healthz')) throw new TypeError('connection refused');
    if (req.method === 'PATCH') {
      pc.pair = { id: 'CP2', address: '10.0.0.2', port: 5000, responses: 1 };
      return respond(200, 'a=ice-ufrag:nu\r\na=ice-pwd:npwd\r\na=candidate:1 1 udp 1 10.0.0.2 5000 typ host\r\n');
    }
    return respond(404);
  };
  FakeEventSource.all.at(-1).fail();
  const r = await within(reconnected, 'reconnected');
  assert.equal(r.how, 'ice-restart');
  assert.equal(r.resumed, true);
  const patch = requests.find((q) => q.method === 'PATCH');
  assert.equal(patch.url, 'http://node-a/whip/cam/p1');
  assert.equal(patch.headers['Content-Type'], 'application/trickle-ice-sdpfrag');
  assert.equal(patch.headers['If-Match'], '*');
  assert.match(patch.body, /^a=ice-ufrag:u2\r\na=ice-pwd:p2\r\n/);
  assert.match(pc.remoteDescription.sdp, /a=ice-ufrag:nu\r\na=ice-pwd:npwd\r\na=candidate:1 1 udp 1 10.0.0.2 5000 typ host\r\n/);
  assert.doesNotMatch(pc.remoteDescription.sdp, /10\.0\.0\.1/);
  assert.equal(session.state, 'connected');

  route = () => respond(200);
  await session.close();
});

test('a refused first POST rejects with the reason, and the session ends', async () => {
  route = () => respond(404, 'stream cam has no publisher');
  const client = new FerryClient({ baseUrl: 'http://gw' });
  await assert.rejects(client.play('cam'), (err) => {
    assert.match(err.message, /404: stream cam has no publisher/);
    assert.equal(err.state, 'failed');
    return true;
  });
  assert.ok(FakePC.all[0].closed);
  await assert.rejects(client.publish('cam', new FakeMediaStream([new FakeTrack('video')]), { codec: 'theora' }), /unknown codec/);
});

test('a second session of the same stream does not take over the first one\'s ticket', async () => {
  route = created('node-a', 's1', 't1');
  const client = new FerryClient({ baseUrl: 'http://gw' });
  const one = client.play('cam');
  await until(() => FakePC.all[0]?.remoteDescription, 'the first answer');
  FakePC.all[0].set('connected', 'connected');
  const first = await within(one, 'the first');
  route = created('node-a', 's2', 't9');
  const two = client.play('cam');
  await until(() => FakePC.all[1]?.remoteDescription, 'the second answer');
  assert.equal(posts()[1].headers['Ferry-Ticket'], undefined);
  FakePC.all[1].set('connected', 'connected');
  const second = await within(two, 'the second');
  assert.equal(store.get('ferry:ticket:play:cam'), 't1');
  route = () => respond(200);
  await second.close();
  await first.close();
});

test('video goes off when the network cannot carry it: publish deactivates, play asks the node', async () => {
  route = (req) =>
    req.method === 'POST' && req.url.endsWith('/video')
      ? respond(204)
      : respond(201, ANSWER, { Location: `${new URL(req.url).pathname}/x1` }, `http://node-a${new URL(req.url).pathname}`);
  const client = new FerryClient({ baseUrl: 'http://gw' });
  const config = { badSamples: 1 };
  const publishing = client.publish('cam', new FakeMediaStream([new FakeTrack('audio'), new FakeTrack('video')]), { config });
  const playing = client.play('cam', { config });
  await until(() => FakePC.all.length === 2 && FakePC.all.every((pc) => pc.remoteDescription), 'the answers');
  const [pubPc, playPc] = FakePC.all;
  pubPc.outgoing = 100_000;
  pubPc.set('connected', 'connected');
  playPc.set('connected', 'connected');
  // The player loses a third of its packets (a cheap stream alone would not degrade it).
  const lossy = setInterval(() => {
    playPc.packetsReceived += 20;
    playPc.packetsLost += 10;
  }, 100);
  const [pub, view] = await within(Promise.all([publishing, playing]), 'connected');
  const degraded = (s) => new Promise((resolve) => s.on('degraded', resolve));
  const stats = new Promise((resolve) => view.on('stats', resolve));
  const [d1, d2] = await within(Promise.all([degraded(pub), degraded(view)]), 'degraded', 4000);
  assert.deepEqual([d1.active, d1.bps], [true, 100_000]);
  clearInterval(lossy);
  assert.equal(d2.active, true);
  assert.ok(d2.loss > 0.15, `loss ${d2.loss}`);
  assert.equal(pub.state, 'degraded');
  const video = pubPc.transceivers.find((t) => t.receiver.track.kind === 'video');
  await until(() => video.sender.params.encodings.every((e) => e.active === false), 'the sender off');
  await until(() => requests.some((r) => r.url.endsWith('/video')), 'the video POST');
  const off = requests.find((r) => r.url.endsWith('/video'));
  assert.equal(off.url, 'http://node-a/whep/cam/x1/video');
  assert.deepEqual(JSON.parse(off.body), { enabled: false });
  assert.equal(off.headers['Content-Type'], 'application/json');
  const digest = await within(stats, 'stats');
  assert.equal(digest.event, 'stats');
  assert.equal(digest.session, 'x1');
  assert.equal(typeof digest.migrations, 'number');
  const now = await view.stats();
  assert.equal(now.framesDecoded, 0);
  route = () => respond(200);
  await Promise.all([pub.close(), view.close()]);
});

test('relay only: the gateway\'s TURN relays are fetched first and the connection uses only them', async () => {
  const relays = {
    ice_servers: [
      { urls: ['turn:10.0.0.9:3478?transport=udp'], username: '4600:u1', credential: 'c1' },
      { urls: ['turn:10.0.0.8:3478?transport=udp'], username: '4600:u1', credential: 'c1' },
    ],
    ttl: 3600,
  };
  const answer = created('node-a', 's9', 't9');
  route = (req) =>
    req.url.endsWith('/v1/turn/credentials') ? respond(200, JSON.stringify(relays)) : answer(req);
  const client = new FerryClient({ baseUrl: 'http://gw', token: 'secret' });
  client.play('cam', { relayOnly: true, user: 'u1' });
  await until(() => FakePC.all[0]?.remoteDescription, 'the answer');
  const [ask, post] = posts();
  assert.equal(ask.url, 'http://gw/v1/turn/credentials');
  assert.equal(ask.headers.Authorization, 'Bearer secret');
  assert.deepEqual(JSON.parse(ask.body), { user: 'u1', stream: 'cam' });
  assert.equal(post.url, 'http://gw/whep/cam');
  const config = FakePC.all[0].config;
  assert.equal(config.iceTransportPolicy, 'relay');
  // One relay at a time: the primary.
  assert.deepEqual(
    config.iceServers.map((s) => [s.urls[0], s.username, s.credential]),
    [['turn:10.0.0.9:3478?transport=udp', '4600:u1', 'c1']],
  );
});

test('relays the gateway cannot give are an error event, and the session goes on without them', async () => {
  const answer = created('node-a', 's8', 't8');
  route = (req) =>
    req.url.endsWith('/v1/turn/credentials') ? respond(503, 'no TURN relays are configured') : answer(req);
  const client = new FerryClient({ baseUrl: 'http://gw' });
  const playing = client.play('cam', { turn: true });
  await until(() => FakePC.all[0]?.remoteDescription, 'the answer');
  assert.equal(FakePC.all[0].config.iceTransportPolicy, 'all');
  assert.deepEqual(FakePC.all[0].config.iceServers, []);
  FakePC.all[0].set('connected', 'connected');
  const session = await playing;
  const error = session.history.find((e) => e.event === 'error');
  assert.equal(error?.code, 'turn-unavailable');
  assert.match(error.message, /503 no TURN relays are configured/);
});

test('a draining relay the transport uses: fresh relays, an ICE restart, relay-moved; others are ignored', async () => {
  const servers = (hosts) => ({
    ice_servers: hosts.map((h) => ({ urls: [`turn:${h}:3478?transport=udp`], username: '4600:u1', credential: 'c1' })),
    ttl: 3600,
  });
  let relays = servers(['10.0.0.9', '10.0.0.8']);
  const answer = created('node-a', 's7', 't7');
  route = (req) => {
    if (req.url.endsWith('/v1/turn/credentials')) return respond(200, JSON.stringify(relays));
    if (req.method === 'PATCH') {
      FakePC.all[0].pair = { id: 'CP2', address: '10.0.0.1', port: 4000, responses: 1 };
      return respond(200, 'a=ice-ufrag:nu\r\na=ice-pwd:npwd\r\na=candidate:1 1 udp 1 10.0.0.1 4000 typ host\r\n');
    }
    return answer(req);
  };
  const client = new FerryClient({ baseUrl: 'http://gw' });
  const playing = client.play('cam', { relayOnly: true, user: 'u1' });
  await until(() => FakePC.all[0]?.remoteDescription, 'the answer');
  FakePC.all[0].set('connected', 'connected');
  const session = await within(playing, 'connected');
  const es = FakeEventSource.all.at(-1);
  // A relay this transport does not use (a backup is not in its configuration): nothing happens.
  es.send('turn-drain', { relays: ['turn:10.0.0.7:3478', 'turn:10.0.0.8:3478'] });
  await sleep(50);
  assert.equal(requests.filter((r) => r.method === 'PATCH').length, 0);
  // Its primary drains: new relays from the gateway, an ICE restart at the session's URL.
  relays = servers(['10.0.0.8', '10.0.0.6']);
  const moved = new Promise((resolve) => session.on('relay-moved', resolve));
  es.send('turn-drain', { relays: ['turn:10.0.0.9:3478?transport=udp', 42] });
  const m = await within(moved, 'relay-moved');
  assert.deepEqual(m.drained, ['turn:10.0.0.9:3478?transport=udp']);
  assert.equal(posts().filter((r) => r.url.endsWith('/v1/turn/credentials')).length, 2, 'asked again');
  const patch = requests.find((q) => q.method === 'PATCH');
  assert.equal(patch.url, 'http://node-a/whep/cam/s7');
  assert.deepEqual(
    FakePC.all[0].config.iceServers.map((s) => s.urls[0]),
    ['turn:10.0.0.8:3478?transport=udp'],
    'the new primary',
  );
  assert.equal(FakePC.all[0].config.iceTransportPolicy, 'relay');
  assert.equal(FakePC.all.length, 1, 'the same connection');
  assert.equal(session.state, 'connected');
  route = () => respond(200);
  await session.close();
});

test('relay only: one relay at a time, and the next backup after the path is lost', async () => {
  const relays = {
    ice_servers: ['10.0.0.9', '10.0.0.8', '10.0.0.7'].map((h) => ({
      urls: [`turn:${h}:3478?transport=udp`],
      username: '4600:u2',
      credential: 'c2',
    })),
    ttl: 3600,
  };
  const answer = created('node-a', 's6', 't6');
  route = (req) => {
    if (req.url.endsWith('/v1/turn/credentials')) return respond(200, JSON.stringify(relays));
    if (req.url.endsWith('/healthz')) return respond(200, 'ok');
    if (req.method === 'PATCH') {
      FakePC.all[0].pair = { id: 'CP3', address: '10.0.0.1', port: 4000, responses: 1 };
      // A player is through at its next frame.
      FakePC.all[0].framesDecoded += 30;
      return respond(200, 'a=ice-ufrag:nu\r\na=ice-pwd:npwd\r\na=candidate:1 1 udp 1 10.0.0.1 4000 typ host\r\n');
    }
    return answer(req);
  };
  const client = new FerryClient({ baseUrl: 'http://gw' });
  const playing = client.play('cam', { relayOnly: true, user: 'u2', config: { backoffBase: 10 } });
  await until(() => FakePC.all[0]?.remoteDescription, 'the answer');
  const pc = FakePC.all[0];
  assert.deepEqual(pc.config.iceServers.map((s) => s.urls[0]), ['turn:10.0.0.9:3478?transport=udp']);
  pc.set('connected', 'connected');
  const session = await within(playing, 'connected');
  // ICE goes: the restart that recovers it runs through the first backup, the gateway not asked again.
  const reconnected = new Promise((resolve) => session.on('reconnected', resolve));
  pc.set('disconnected', 'disconnected');
  await within(reconnected, 'reconnected');
  assert.ok(requests.some((q) => q.method === 'PATCH'), 'an ICE restart');
  assert.deepEqual(pc.config.iceServers.map((s) => s.urls[0]), ['turn:10.0.0.8:3478?transport=udp']);
  assert.equal(posts().filter((r) => r.url.endsWith('/v1/turn/credentials')).length, 1, 'from the cached list');
  route = () => respond(200);
  await session.close();
});

// ---- caps, pause, dynacast ------------------------------------------------------------------

const LAYER_REL = 'urn:ietf:params:whep:ext:core:layer';

/** A 201 as a node sends it to a viewer: the events and the layer `Link`s (two headers). */
const createdWithLinks = (node, session, ticket, layerPath = 'layer') => (req) => {
  const location = `http://${node}/whep/cam/${session}`;
  return respond(
    201,
    ANSWER,
    [
      ['Location', location],
      ['Ferry-Session', session],
      ['Ferry-Node', node],
      ['Ferry-Ticket', ticket],
      ['Link', `<${location}/events>; rel="urn:ietf:params:whep:ext:core:server-sent-events"; events="migrate,ticket,end"`],
      ['Link', `<${location}/${layerPath}>; rel="${LAYER_REL}"`],
    ],
    `http://${node}${new URL(req.url).pathname}`,
  );
};

test('Link headers: the layer rel is found among several, commas in quoted parameters included', () => {
  const header =
    '<turn:10.0.0.1:3478>; rel="ice-server"; username="u,1", ' +
    '</whep/cam/s1/events>; rel="urn:ietf:params:whep:ext:core:server-sent-events"; events="migrate,ticket,end", ' +
    `<layer>; rel=${LAYER_REL}`;
  assert.equal(linkTarget(header, LAYER_REL, 'http://n:1/whep/cam/s1/'), 'http://n:1/whep/cam/s1/layer');
  assert.equal(
    linkTarget(header, 'urn:ietf:params:whep:ext:core:server-sent-events', 'http://n:1/x'),
    'http://n:1/whep/cam/s1/events',
  );
  assert.equal(linkTarget(header, 'other', 'http://n:1/'), null);
  assert.equal(linkTarget(null, LAYER_REL, 'http://n:1/'), null);
});

test('caps are checked against the node\'s ranges before anything is sent', () => {
  assert.deepEqual(normalizeQuality(null), {});
  assert.deepEqual(normalizeQuality({ maxHeight: 180, maxBitrate: undefined, maxFps: null }), { maxHeight: 180 });
  assert.throws(() => normalizeQuality({ maxHeigth: 180 }), TypeError);
  assert.throws(() => normalizeQuality({ maxHeight: 0 }), RangeError);
  assert.throws(() => normalizeQuality({ maxHeight: 180.5 }), TypeError);
  assert.throws(() => normalizeQuality({ maxBitrate: 9_999 }), RangeError);
  assert.throws(() => normalizeQuality({ maxFps: '30' }), TypeError);
  assert.throws(() => normalizeQuality([1]), TypeError);
  assert.deepEqual(activeEncodings('{"encodings":[{"mid":"1","rid":"f","active":false},{"rid":3},{"rid":"q","active":"no"}]}'), [
    { mid: '1', rid: 'f', active: false },
  ]);
  assert.deepEqual(activeEncodings('not json'), []);
});

test('setQuality: caps to the layer URL of the answer, refusals reject, and a reconnect migration gets them before its media', async () => {
  let layerStatus = 204;
  let answer = createdWithLinks('node-a', 's1', 't1', 'caps');
  route = (req) => (req.url.includes('/caps') || req.url.endsWith('/layer') ? respond(layerStatus, layerStatus === 204 ? '' : 'bad layer request: nope') : answer(req));
  const client = new FerryClient({ baseUrl: 'http://gw', token: 'secret' });
  const playing = client.play('cam');
  await until(() => FakePC.all[0]?.remoteDescription, 'the answer');
  FakePC.all[0].set('connected', 'connected');
  const session = await within(playing, 'connected');
  assert.equal(session.quality, null);
  assert.equal(requests.filter((r) => r.url.includes('/caps')).length, 0, 'no caps until the app sets some');

  await session.setQuality({ maxHeight: 180, maxBitrate: 300_000 });
  const caps = () => requests.filter((r) => r.url.includes('/caps') || r.url.endsWith('/layer'));
  const [first] = caps();
  assert.equal(first.url, 'http://node-a/whep/cam/s1/caps', 'the URL the Link named');
  assert.equal(first.method, 'POST');
  assert.equal(first.headers['Content-Type'], 'application/json');
  assert.equal(first.headers.Authorization, 'Bearer secret');
  assert.deepEqual(JSON.parse(first.body), { maxHeight: 180, maxBitrate: 300_000 });
  assert.deepEqual(session.quality, { maxHeight: 180, maxBitrate: 300_000 });
  assert.deepEqual((await session.stats()).quality, { maxHeight: 180, maxBitrate: 300_000 });

  // Bad values never leave; a refusal rejects with the status; publishers have no caps.
  await assert.rejects(session.setQuality({ maxHeight: -1 }), RangeError);
  layerStatus = 400;
  await assert.rejects(session.setQuality({ maxHeight: 360 }), (err) => err.status === 400 && /bad layer request/.test(err.message));
  layerStatus = 204;
  await session.setQuality({ maxHeight: 180 });
  assert.equal(caps().length, 3);

  // A reconnect migration: a new session on node-b, told the caps as soon as it answered (before
  // the new transport's first frame), and not again once it carries the media.
  answer = createdWithLinks('node-b', 's1', 't2');
  const migrated = new Promise((resolve) => session.on('migrated', resolve));
  FakeEventSource.all.at(-1).send('migrate', {
    mode: 'reconnect', from: 'node-a', target: 'node-b', location: 'http://node-b/whep/cam', ticket: 'mig', epoch: 2,
  });
  await until(() => caps().length === 4, 'the caps to node-b');
  assert.equal(caps()[3].url, 'http://node-b/whep/cam/s1/layer');
  assert.deepEqual(JSON.parse(caps()[3].body), { maxHeight: 180 });
  assert.equal(session.pc, FakePC.all[0], 'sent before the switch');
  FakePC.all[1].framesDecoded = 1;
  await within(migrated, 'migrated');
  await sleep(30);
  assert.equal(caps().length, 4, 'once per node');

  // An edge migration: the session's URL changes, the caps follow (the node would carry them,
  // but the SDK cannot know the move kept them).
  FakeEventSource.all.at(-1).send('migrate', {
    mode: 'edge', from: 'node-b', target: 'node-c', location: 'http://node-c/whep/cam/s1', epoch: 3,
  });
  await until(() => caps().length === 5, 'the caps to node-c');
  assert.equal(caps()[4].url, 'http://node-c/whep/cam/s1/layer');

  // Automatic again: {} (also after the next move).
  await session.setQuality(null);
  assert.deepEqual(JSON.parse(caps()[5].body), {});
  assert.deepEqual(session.quality, {});

  const publishing = client.publish('cam2', new FakeMediaStream([new FakeTrack('video')]));
  await until(() => FakePC.all.at(-1).remoteDescription && FakePC.all.length === 3, 'the publisher\'s answer');
  FakePC.all.at(-1).set('connected', 'connected');
  const publisher = await within(publishing, 'the publisher');
  await assert.rejects(publisher.setQuality({ maxHeight: 180 }), TypeError);
  await assert.rejects(publisher.pauseVideo(), TypeError);
  route = () => respond(200);
  await publisher.close();
  await session.close();
  await assert.rejects(session.setQuality({}), /ended/);
});

test('play({ quality }): the first session gets its caps with its answer', async () => {
  route = (req) => (req.url.endsWith('/layer') ? respond(204) : created('node-a', 's3', 't1')(req));
  const client = new FerryClient({ baseUrl: 'http://gw' });
  const playing = client.play('cam', { quality: { maxWidth: 320 } });
  await until(() => requests.some((r) => r.url.endsWith('/layer')), 'the caps');
  const caps = requests.find((r) => r.url.endsWith('/layer'));
  assert.equal(caps.url, 'http://node-a/whep/cam/s3/layer', 'without a Link: {location}/layer');
  assert.deepEqual(JSON.parse(caps.body), { maxWidth: 320 });
  FakePC.all[0].set('connected', 'connected');
  await within(playing, 'connected');
  assert.equal(requests.filter((r) => r.url.endsWith('/layer')).length, 1);
  await assert.rejects(client.play('cam', { quality: { maxWidth: 0 } }), RangeError);
});

test('pauseVideo: the node stops video, kept across an ICE-restart migration (video asked for until its first frame)', async () => {
  route = (req) => {
    if (req.url.endsWith('/video')) return respond(204);
    if (req.method === 'PATCH') {
      return respond(200, 'a=ice-ufrag:nu\r\na=ice-pwd:npwd\r\na=candidate:1 1 udp 1 10.0.0.2 5000 typ host\r\n');
    }
    return created('node-a', 's4', 't1')(req);
  };
  const client = new FerryClient({ baseUrl: 'http://gw' });
  const playing = client.play('cam');
  await until(() => FakePC.all[0]?.remoteDescription, 'the answer');
  const pc = FakePC.all[0];
  pc.set('connected', 'connected');
  const session = await within(playing, 'connected');
  pc.framesDecoded = 10;
  await sleep(50);
  const video = () => requests.filter((r) => r.url.endsWith('/video')).map((r) => [r.url, JSON.parse(r.body).enabled]);
  await session.pauseVideo();
  assert.equal(session.videoPaused, true);
  assert.deepEqual(video(), [['http://node-a/whep/cam/s4/video', false]]);
  await session.pauseVideo();
  assert.equal(video().length, 1, 'nothing new to say');

  // The session moves by an ICE restart with its pause: the machine waits for a frame, so video
  // is asked for at the target until one came, then paused again.
  const migrated = new Promise((resolve) => session.on('migrated', resolve));
  pc.pair = { id: 'CP2', address: '10.0.0.2', port: 5000, responses: 1 };
  FakeEventSource.all.at(-1).send('migrate', {
    mode: 'ice-restart', from: 'node-a', target: 'node-b', location: 'http://node-b/whep/cam/s4', epoch: 2,
  });
  await until(() => video().length === 2, 'video asked for at the target');
  assert.deepEqual(video()[1], ['http://node-b/whep/cam/s4/video', true]);
  pc.framesDecoded = 11;
  await within(migrated, 'migrated');
  await until(() => video().length === 3, 'paused again');
  assert.deepEqual(video()[2], ['http://node-b/whep/cam/s4/video', false]);
  assert.equal(session.state, 'connected');

  await session.resumeVideo();
  assert.deepEqual(video()[3], ['http://node-b/whep/cam/s4/video', true]);
  assert.equal((await session.stats()).videoPaused, false);
  route = () => respond(200);
  await session.close();
});

test('dynacast: a simulcast publisher stops encoding what the node says nobody uses, and starts again', async () => {
  route = (req) => respond(201, ANSWER, { Location: 'http://node-a/whip/cam/p1', 'Ferry-Node': 'node-a' }, 'http://node-a/whip/cam');
  const media = new FakeMediaStream([new FakeTrack('audio'), new FakeTrack('video')]);
  const client = new FerryClient({ baseUrl: 'http://gw' });
  await assert.rejects(client.publish('cam', media, { simulcast: [{ rid: 'a' }, { rid: 'a' }] }), TypeError);
  const publishing = client.publish('cam', media, { simulcast: true, config: { badSamples: 1 } });
  await until(() => FakePC.all[0]?.remoteDescription, 'the answer');
  const pc = FakePC.all[0];
  const sender = pc.transceivers.find((t) => t.receiver.track.kind === 'video').sender;
  assert.deepEqual(pc.transceivers.find((t) => t.receiver.track.kind === 'video').init.sendEncodings.map((e) => [e.rid, e.scaleResolutionDownBy]), [
    ['q', 4],
    ['h', 2],
    ['f', 1],
  ]);
  assert.deepEqual(pc.transceivers.find((t) => t.receiver.track.kind === 'audio').init.sendEncodings, undefined);
  assert.equal(SIMULCAST.length, 3);
  pc.set('connected', 'connected');
  const session = await within(publishing, 'connected');
  const active = () => Object.fromEntries(sender.params.encodings.map((e) => [e.rid, e.active]));
  const events = [];
  session.on('dynacast', (e) => events.push(e));
  const es = FakeEventSource.all.at(-1);
  es.send('active', { encodings: [{ mid: '1', rid: 'q', active: true }, { mid: '1', rid: 'h', active: true }, { mid: '1', rid: 'f', active: false }] });
  await until(() => active().f === false, 'f off');
  assert.deepEqual(active(), { q: true, h: true, f: false });
  assert.equal(events.length, 1);
  assert.deepEqual(events[0].encodings.map((e) => [e.rid, e.active]), [['q', true], ['h', true], ['f', false]]);
  assert.deepEqual((await session.stats()).inactiveEncodings, ['f']);
  const sets = sender.sets;
  es.send('active', { encodings: [{ mid: '1', rid: 'f', active: false }] });
  await sleep(20);
  assert.equal(sender.sets, sets, 'no change, no setParameters');
  es.send('active', { encodings: [{ mid: '1', rid: 'f', active: true }] });
  await until(() => active().f === true, 'f back on');

  // Degraded: everything off; back: what dynacast wants.
  es.send('active', { encodings: [{ mid: '1', rid: 'f', active: false }] });
  await until(() => active().f === false, 'f off again');
  pc.outgoing = 10_000;
  await until(() => session.state === 'degraded', 'degraded', 4000);
  await until(() => Object.values(active()).every((a) => a === false), 'all off');

  // An edge move to another node: every encoding on again (that node has not seen f: it could
  // never ask for it back) — once video is back.
  es.send('migrate', { mode: 'edge', from: 'node-a', target: 'node-b', location: 'http://node-b/whip/cam/p1', epoch: 2 });
  await until(() => FakeEventSource.all.at(-1).url === 'http://node-b/whip/cam/p1/events', 'following node-b');
  assert.deepEqual((await session.stats()).inactiveEncodings, []);
  route = () => respond(200);
  await session.close();
});
