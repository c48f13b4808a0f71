// Reporting to the collector: a JSON report every second to `/report/{id}`, and commands from
// `/command/{id}` polled four times a second. Every report carries:
//   id, seq (1, 2, ...), t (ms since the page loaded), errors (see errors.js),
//   commands (the commands run so far, in order), and whatever `collect()` returns.

export const params = new URLSearchParams(location.search);
export const id = params.get('id') ?? 'page';

const REPORT_EVERY_MS = 1000;
const POLL_EVERY_MS = 250;

/** Records an error that the page handled (it shows up in `errors`, nothing is thrown). */
export function fail(context, error) {
  window.ferryErrors.push(`${context}: ${error?.stack ?? error}`);
}

/** A bounded, timestamped log of notable events, included in reports by the pages. */
export class Events {
  constructor(limit = 100) {
    this.limit = limit;
    this.list = [];
  }
  add(what) {
    this.list.push({ t: Math.round(performance.now()), what });
    if (this.list.length > this.limit) this.list.shift();
  }
}

/**
 * Starts reporting `await collect()` every second and running commands: `handlers` maps a
 * command name to an async function. Returns `send`, which reports right away.
 */
export function startReporting(collect, handlers = {}) {
  window.ferryReporting = true;
  const commands = [];
  let seq = 0;

  const send = async () => {
    let body;
    try {
      body = await collect();
    } catch (e) {
      fail('collecting the report', e);
    }
    const report = {
      id,
      seq: ++seq,
      t: Math.round(performance.now()),
      ...body,
      commands,
      errors: window.ferryErrors,
    };
    await fetch(`/report/${encodeURIComponent(id)}`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(report),
    });
  };

  const reportLoop = async () => {
    try {
      await send();
    } catch {
      // The collector is gone (the test is over) or busy; the next round will tell.
    }
    setTimeout(reportLoop, REPORT_EVERY_MS);
  };

  const pollLoop = async () => {
    try {
      const response = await fetch(`/command/${encodeURIComponent(id)}`, { cache: 'no-store' });
      for (const command of await response.json()) {
        commands.push(command);
        const handler = handlers[command];
        if (handler) {
          await handler().catch((e) => fail(`command ${command}`, e));
        } else {
          fail('command', `unknown command ${command}`);
        }
        await send();
      }
    } catch {
      // As above.
    }
    setTimeout(pollLoop, POLL_EVERY_MS);
  };

  reportLoop();
  pollLoop();
  return send;
}
