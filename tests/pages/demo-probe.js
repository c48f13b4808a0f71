// Injected into the `ferry dev` demo page by the collector (after errors.js): once the page has
// loaded, reports what rendered, so a test can check the page works without a server.
// With `server=URL&run=1` it also drives the page like a user: sets the server, clicks Publish,
// then Play, and reports what the Play panel shows.
// Report (besides id, seq, t, commands, errors):
//   title, headings (the h2 texts of the Publish and Play panels), panels (every h2 text),
//   controls (ids of the expected controls that exist and are visible), server (the WHIP/WHEP base
//   URL field), codecs (the codec options as shown), status: { publish, play, cluster } (the
//   panels' status lines), shown: { framesDecoded, freezeCount, packetsLost, resolution } (the
//   Play panel's stats), video: { width, frames } (the <video>),
//   publisher, viewer: { id, node, state } of the page's SDK sessions, or null,
//   markers (`ferryDemo.markers`: { event, mode, from, to, blackoutMs, firstFrameMs?, t }),
//   moves (`ferryDemo.moves`: the cluster panel's moves and their outcome),
//   sessions (the cluster panel's session rows: { id, node, mode (selected), modes (offered),
//   targets (the enabled "move to" buttons' nodes), outcome }),
//   recordings (the cluster panel's recording rows: { id, stream, state, node, moves }),
//   transcodes (its transcode rows: { id, rungs, state, node, encoder, rtf }),
//   clicked (what the last `move-viewer-*` command clicked: { session, mode, target, label }),
//   log (the page's last 30 log lines),
//   plot (after a `snapshot` command: { t, png }, the plot as a PNG data URL; null before),
//   adaptPlot (after `snapshot-adapt`: { t, png }, the node's-view plot), adaptation
//   (`ferryDemo.adaptation`: the node's view of the viewer, last poll: { node, session, estimateBps,
//   allocatedBps, congestion, preferences, height, width, heightFromNode, layers, layerHeights,
//   playing, target,
//   points }), quality ({ bitrate, height }: the Play panel's selects; last: `ferryDemo.quality`),
//   room (the room panel: { status, participants: [{ id, name, mic, hand, me }], chat: [text] }).
// Commands: `move-viewer-edge`, `move-viewer-ice-restart`, `move-viewer-reconnect` (in the
// cluster panel's row of the viewer's session: pick the mode, click the first "move to" button;
// an error when there is no such row or button), `record` (click "record stream"), `transcode`
// (click "transcode 360p"), `quality-auto`, `quality-height-180`, `quality-height-360`,
// `quality-bitrate-300000`, `quality-bitrate-1000000` (set the Play panel's select(s) like a user),
// `snapshot-adapt` (take the node's-view plot's PNG), `snapshot`
// (take the plot's PNG), `room-join` (the room panel's Join, room `demo-room`, name `Page`),
// `room-mute`, `room-hand` (its buttons), `room-chat` (sends "hello from the page").
import { params, startReporting } from './report.js';

const CONTROLS = ['server', 'stream', 'codec', 'publish', 'publish-stop', 'play', 'play-stop', 'local', 'remote'];

const visible = (el) => el.getClientRects().length > 0;
const text = (sel) => document.querySelector(sel)?.textContent.trim() ?? null;
const session = (s) => (s ? { id: s.id, node: s.node, state: s.state } : null);

let clicked = null;
let plot = null;
let adaptPlot = null;

/** Sets the Play panel's caps select `id` to `value` (and the other to automatic when `only`). */
const pick = (values) => async () => {
  for (const [id, value] of Object.entries(values)) {
    const select = document.getElementById(id);
    if (![...(select?.options ?? [])].some((o) => o.value === value)) throw new Error(`#${id} offers no ${value}`);
    select.value = value;
    select.dispatchEvent(new Event('change', { bubbles: true }));
  }
};

/** Picks `mode` in the viewer session's row of the cluster panel and clicks its move button. */
const moveViewer = (mode) => async () => {
  const viewer = window.ferryDemo?.viewer;
  if (!viewer?.id) throw new Error('the page has no viewer session');
  const row = document.querySelector(`#sessions tr[data-session="${CSS.escape(viewer.id)}"]`);
  if (!row) throw new Error(`the cluster panel lists no session ${viewer.id}`);
  const select = row.querySelector('select[data-role="mode"]');
  if (![...(select?.options ?? [])].some((o) => o.value === mode)) {
    throw new Error(`the row of ${viewer.id} offers no mode ${mode}`);
  }
  select.value = mode;
  select.dispatchEvent(new Event('change', { bubbles: true }));
  const button = row.querySelector('button[data-target]:not(:disabled)');
  if (!button) throw new Error(`the row of ${viewer.id} has no enabled "move to" button`);
  clicked = { session: viewer.id, mode, target: button.dataset.target, label: button.textContent.trim() };
  button.click();
};

/** Clicks the enabled button `id` (an error when it is missing or disabled). */
const click = (id) => {
  const button = document.getElementById(id);
  if (!button || button.disabled) throw new Error(`no enabled #${id}`);
  button.click();
};

addEventListener('load', () => {
  if (params.get('server')) document.getElementById('server').value = params.get('server');
  if (params.get('codec')) document.getElementById('codec').value = params.get('codec');
  if (params.get('run') === '1') {
    document.getElementById('publish').click();
    setTimeout(() => document.getElementById('play').click(), 2000);
  }
  startReporting(
    async () => {
      const remote = document.getElementById('remote');
      const demo = window.ferryDemo;
      return {
        title: document.title,
        headings: [...document.querySelectorAll('#publish-panel h2, #play-panel h2')].map((h) => h.textContent.trim()),
        panels: [...document.querySelectorAll('h2')].map((h) => h.textContent.trim()),
        controls: CONTROLS.filter((id) => {
          const el = document.getElementById(id);
          return el && visible(el);
        }),
        server: document.getElementById('server')?.value ?? null,
        codecs: [...document.querySelectorAll('#codec option')].map((o) => o.textContent.trim()),
        status: { publish: text('#publish-status'), play: text('#play-status'), cluster: text('#cluster-status') },
        shown: Object.fromEntries(
          ['framesDecoded', 'freezeCount', 'packetsLost', 'resolution'].map((k) => [k, text(`[data-stat="${k}"]`)]),
        ),
        video: { width: remote.videoWidth, frames: remote.getVideoPlaybackQuality?.().totalVideoFrames ?? 0 },
        publisher: session(demo?.publisher),
        viewer: session(demo?.viewer),
        markers: demo?.markers ?? [],
        moves: demo?.moves ?? [],
        sessions: [...document.querySelectorAll('#sessions tr[data-session]')].map((row) => ({
          id: row.dataset.session,
          node: row.dataset.node ?? null,
          mode: row.querySelector('select[data-role="mode"]')?.value ?? null,
          modes: [...row.querySelectorAll('select[data-role="mode"] option')].map((o) => o.value),
          targets: [...row.querySelectorAll('button[data-target]:not(:disabled)')].map((b) => b.dataset.target),
          outcome: row.cells[6]?.textContent.trim() ?? null,
        })),
        recordings: [...document.querySelectorAll('#recordings tr[data-recording]')].map((row) => ({
          id: row.dataset.recording,
          stream: row.cells[1].textContent.trim(),
          state: row.cells[2].textContent.trim(),
          node: row.cells[3].textContent.trim(),
          moves: row.cells[5].textContent.trim(),
        })),
        transcodes: [...document.querySelectorAll('#transcodes tr[data-transcode]')].map((row) => ({
          id: row.dataset.transcode,
          rungs: row.cells[1].textContent.trim(),
          state: row.cells[2].textContent.trim(),
          node: row.cells[3].textContent.trim(),
          encoder: row.cells[4].textContent.trim(),
          rtf: row.cells[5].textContent.trim(),
        })),
        clicked,
        log: demo?.log.slice(-30) ?? [],
        plot,
        adaptPlot,
        adaptation: demo?.adaptation ?? null,
        quality: {
          bitrate: document.getElementById('quality-bitrate')?.value ?? null,
          height: document.getElementById('quality-height')?.value ?? null,
          last: demo?.quality ?? null,
        },
        room: {
          status: text('#room-status'),
          participants: [...document.querySelectorAll('#participants tr[data-participant]')].map((row) => ({
            id: row.dataset.participant,
            name: row.cells[1].textContent.trim(),
            mic: row.cells[2].textContent.trim(),
            hand: row.cells[3].textContent.trim(),
            me: row.classList.contains('me'),
          })),
          chat: [...document.querySelectorAll('#chat li')].map((li) => li.textContent.trim()),
        },
      };
    },
    {
      'move-viewer-edge': moveViewer('edge'),
      'move-viewer-ice-restart': moveViewer('ice-restart'),
      'move-viewer-reconnect': moveViewer('reconnect'),
      record: async () => {
        const button = document.getElementById('record');
        if (!button) throw new Error('the cluster panel has no "record stream" button');
        button.click();
      },
      transcode: async () => {
        const button = document.getElementById('transcode');
        if (!button) throw new Error('the cluster panel has no "transcode 360p" button');
        button.click();
      },
      'room-join': async () => {
        document.getElementById('room').value = 'demo-room';
        document.getElementById('room-name').value = 'Page';
        click('room-join');
      },
      'room-mute': async () => click('room-mute'),
      'room-hand': async () => click('room-hand'),
      'room-chat': async () => {
        document.getElementById('chat-text').value = 'hello from the page';
        document.getElementById('chat-form').requestSubmit();
      },
      'quality-auto': pick({ 'quality-bitrate': '', 'quality-height': '' }),
      'quality-height-180': pick({ 'quality-height': '180' }),
      'quality-height-360': pick({ 'quality-height': '360' }),
      'quality-bitrate-300000': pick({ 'quality-bitrate': '300000' }),
      'quality-bitrate-1000000': pick({ 'quality-bitrate': '1000000' }),
      'snapshot-adapt': async () => {
        if (typeof window.ferryDemo?.adaptPlotPng !== 'function') throw new Error('the page has no ferryDemo.adaptPlotPng');
        adaptPlot = { t: Math.round(performance.now()), png: window.ferryDemo.adaptPlotPng() };
      },
      snapshot: async () => {
        if (typeof window.ferryDemo?.plotPng !== 'function') throw new Error('the page has no ferryDemo.plotPng');
        plot = { t: Math.round(performance.now()), png: window.ferryDemo.plotPng() };
      },
    },
  );
});
