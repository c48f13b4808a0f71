// Injected into the `ferry dev` demo page by the collector (after errors.js): once the page has
// loaded, reports what rendered, so a test can check the page works without a server.
// Report (besides id, seq, t, commands, errors):
//   title, headings (the h2 texts), controls (ids of the expected controls that exist and are
//   visible), server (the WHIP/WHEP base URL field), codecs (the codec options as shown)
import { startReporting } from './report.js';

const CONTROLS = ['server', 'stream', 'codec', 'publish', 'publish-stop', 'play', 'play-stop', 'local', 'remote'];

const visible = (el) => el.getClientRects().length > 0;

addEventListener('load', () => {
  startReporting(async () => ({
    title: document.title,
    headings: [...document.querySelectorAll('h2')].map((h) => h.textContent.trim()),
    controls: CONTROLS.filter((id) => {
      const el = document.getElementById(id);
      return el && visible(el);
    }),
    server: document.getElementById('server')?.value ?? null,
    codecs: [...document.querySelectorAll('#codec option')].map((o) => o.textContent.trim()),
  }));
});
