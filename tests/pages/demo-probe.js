// Injected into the `ferry dev` demo page by the collector (after errors.js): once the page has
// loaded, reports what rendered, so a test can check the page works without a server.
// With `server=URL&run=1` it also drives the page like a user: sets the server, clicks Publish,
// then Play, and reports what the Play panel shows.
// Report (besides id, seq, t, commands, errors):
//   title, headings (the h2 texts), controls (ids of the expected controls that exist and are
//   visible), server (the WHIP/WHEP base URL field), codecs (the codec options as shown),
//   status: { publish, play } (the panels' status lines), shown: { framesDecoded, freezeCount,
//   packetsLost, resolution } (the Play panel's stats), video: { width, frames } (the <video>)
import { params, startReporting } from './report.js';

const CONTROLS = ['server', 'stream', 'codec', 'publish', 'publish-stop', 'play', 'play-stop', 'local', 'remote'];

const visible = (el) => el.getClientRects().length > 0;
const text = (sel) => document.querySelector(sel)?.textContent.trim() ?? null;

addEventListener('load', () => {
  if (params.get('server')) document.getElementById('server').value = params.get('server');
  if (params.get('codec')) document.getElementById('codec').value = params.get('codec');
  if (params.get('run') === '1') {
    document.getElementById('publish').click();
    setTimeout(() => document.getElementById('play').click(), 2000);
  }
  startReporting(async () => {
    const remote = document.getElementById('remote');
    return {
      title: document.title,
      headings: [...document.querySelectorAll('h2')].map((h) => h.textContent.trim()),
      controls: CONTROLS.filter((id) => {
        const el = document.getElementById(id);
        return el && visible(el);
      }),
      server: document.getElementById('server')?.value ?? null,
      codecs: [...document.querySelectorAll('#codec option')].map((o) => o.textContent.trim()),
      status: { publish: text('#publish-status'), play: text('#play-status') },
      shown: Object.fromEntries(
        ['framesDecoded', 'freezeCount', 'packetsLost', 'resolution'].map((k) => [k, text(`[data-stat="${k}"]`)]),
      ),
      video: { width: remote.videoWidth, frames: remote.getVideoPlaybackQuality?.().totalVideoFrames ?? 0 },
    };
  });
});
