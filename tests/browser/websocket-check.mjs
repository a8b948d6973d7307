// AMQP over WebSocket from a real headless Chromium (Debian's, through playwright-core):
// a page runs two unmodified browser clients against DeltaMQ --
//   rhea (AMQP 1.0), its browser build rhea-umd.js, with the browser's own WebSocket;
//   @cloudamqp/amqp-client (AMQP 0-9-1), its AMQPWebSocketClient --
// on every WebSocket URL of the config (the WebSocket port, the HTTP port's /amqp path).
// Each client sends a message to a queue and receives it back, then leaves one more in a
// queue for the test to read over AMQP.
//
//   node websocket-check.mjs '<json config>'
//
// config: {chromium, page (the URL of websocket-page.html, served with rhea-umd.js and
//          amqp-websocket-client.mjs beside it), urls: [{name, url}],
//          queues: {<name>: {rhea, rheaLeft, amqp091, amqp091Left}}, user, password, timeoutMs}
//
// The page's functions (rheaSend, amqp091Send) are the clients' code; this script calls them
// and checks what they return.  The last line printed is "@@result <json>":
// {ok, results: {<name>: {rhea: {body, protocol}, amqp091: {body}}}, problems}.

import { chromium } from "playwright-core";
import { launchChromium, log, progress, step } from "./steps.mjs";

const config = JSON.parse(process.argv[2] || "{}");
const TIMEOUT = config.timeoutMs || 20000;
const problems = [];

async function main() {
  let browser;
  const result = { ok: false, results: {}, problems };
  try {
    browser = await launchChromium(chromium, config.chromium);
    const context = await browser.newContext();
    const page = await context.newPage();
    page.setDefaultTimeout(TIMEOUT);
    page.on("pageerror", (err) => problems.push(`uncaught: ${err.message}`));
    page.on("console", (msg) => { if (msg.type() === "error") problems.push(`console: ${msg.text()}`); });

    step("the page loads both clients");
    const response = await page.goto(config.page);
    if (!response || response.status() !== 200) throw new Error(`GET ${config.page} answered ${response && response.status()}`);
    await page.waitForFunction(() => window.ready === true && typeof rheaUmd === "object");

    const call = (fn, args) => page.evaluate(([name, a]) => window[name](...a), [fn, args]);
    for (const { name, url } of config.urls) {
      const queues = config.queues[name];
      const found = (result.results[name] = {});
      step(`${name}: rhea sends and receives over ${url}`);
      found.rhea = await call("rheaSend", [url, queues.rhea, `rhea via ${name}`, false, config.user, config.password]);
      step(`${name}: rhea leaves a message in ${queues.rheaLeft}`);
      await call("rheaSend", [url, queues.rheaLeft, `left by rhea via ${name}`, true, config.user, config.password]);
      step(`${name}: amqp-client publishes and gets over ${url}`);
      found.amqp091 = await call("amqp091Send", [url, queues.amqp091, `amqp-client via ${name}`, false, config.user, config.password]);
      step(`${name}: amqp-client leaves a message in ${queues.amqp091Left}`);
      await call("amqp091Send", [url, queues.amqp091Left, `left by amqp-client via ${name}`, true, config.user, config.password]);
    }
    if (problems.length) throw new Error(`the page reported errors: ${problems.join("; ")}`);
    result.ok = true;
  } catch (err) {
    result.step = progress.step;
    result.error = err.message;
  } finally {
    if (browser) await browser.close();
  }
  log(`@@result ${JSON.stringify(result)}`);
  process.exit(result.ok ? 0 : 1);
}

main();
