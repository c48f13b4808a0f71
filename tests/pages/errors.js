// Catches the page's errors into `window.ferryErrors`. Loaded as a classic script before any
// module, so it also sees modules that fail to load or parse. Until `report.js` takes over
// (it sets `window.ferryReporting`), errors are sent straight away so that a page whose modules
// never ran still tells the test why.
(() => {
  const errors = (window.ferryErrors = []);
  const id = new URLSearchParams(location.search).get('id') ?? 'page';

  const record = (message) => {
    errors.push(String(message));
    if (!window.ferryReporting) {
      navigator.sendBeacon(`/report/${encodeURIComponent(id)}`, JSON.stringify({ id, errors }));
    }
  };

  // Capture phase: failed <script>/<link> loads fire `error` on the element and do not bubble.
  addEventListener(
    'error',
    (e) => {
      if (e instanceof ErrorEvent) {
        record(`${e.message} (${e.filename}:${e.lineno}:${e.colno})`);
      } else if (e.target && e.target !== window) {
        record(`failed to load ${e.target.src || e.target.href || e.target.tagName}`);
      }
    },
    true,
  );
  addEventListener('unhandledrejection', (e) => {
    record(`unhandled rejection: ${e.reason?.stack ?? e.reason}`);
  });
  const consoleError = console.error.bind(console);
  console.error = (...args) => {
    record(`console.error: ${args.map((a) => a?.stack ?? String(a)).join(' ')}`);
    consoleError(...args);
  };
})();
