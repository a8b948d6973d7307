// Drives the web console's History page in a real headless Chromium (Debian's, through
// playwright-core), as a person would: logs in, opens History, runs SQL over the broker's
// journal through the warm Spark Connect server, and checks the table shown.
//
//   node history-check.mjs '<json config>'
//
// config: {url, user, password, chromium, screenshot, failureScreenshot, queue, published,
//          timeoutMs}
//
// tests/mgmt/test_sql_history.py runs it.  The last line it prints is "@@result <json>";
// it exits 0 only when every step passed.

import { chromium } from "playwright-core";
import { launchChromium, log, progress, step, waiting } from "./steps.mjs";

const config = JSON.parse(process.argv[2] || "{}");
const TIMEOUT = config.timeoutMs || 15000;
const { until, textOf, expectText } = waiting(TIMEOUT);
// a query the warm server answers in well under a second; the first one a little longer
const QUERY_TIMEOUT = 90000;
const problems = [];


// The result table as text: [[header...], [cell...]...]
async function table(page) {
  return page.evaluate(() => {
    const t = document.getElementById("history-table");
    return [Array.from(t.tHead.rows[0].cells, (c) => c.textContent),
      ...Array.from(t.tBodies[0].rows, (r) => Array.from(r.cells, (c) => c.textContent))];
  });
}

async function runQuery(page, query) {
  await page.getByLabel(/^SQL/).fill(query);
  await page.getByRole("button", { name: "Run", exact: true }).click();
}

async function run(page) {
  const summary = page.getByTestId("history-summary");

  step("logging in");
  await page.goto(config.url);
  await page.getByLabel("User name", { exact: true }).fill(config.user);
  await page.getByLabel("Password", { exact: true }).fill(config.password);
  await page.getByRole("button", { name: "Log in" }).click();

  step("the History page says which server answers");
  await page.getByRole("tab", { name: "History" }).click();
  await expectText(page.getByTestId("history-server"),
    /^Queries run on the Spark Connect server at sc:\/\/localhost:\d+, over \/.+\.$/, "the server line");

  step("an example fills the query box");
  await page.getByLabel("Examples", { exact: true }).selectOption("Dead letters");
  const example = await page.getByLabel(/^SQL/).inputValue();
  if (!/FROM dead_letters/.test(example)) throw new Error(`the example put ${JSON.stringify(example)}`);

  step("a query over the journal shows its result as a table");
  await runQuery(page, `SELECT queue, count(*) AS messages, min(CAST(body AS STRING)) AS body\n`
    + `FROM queue_history WHERE queue = '${config.queue}' GROUP BY queue`);
  await expectText(summary, /^1 row in [\d.]+ ms$/, "the summary", QUERY_TIMEOUT);
  const shown = await table(page);
  const expected = [["queue", "messages", "body"], [config.queue, String(config.published), config.firstBody]];
  if (JSON.stringify(shown) !== JSON.stringify(expected)) {
    throw new Error(`the table shows ${JSON.stringify(shown)}, expected ${JSON.stringify(expected)}`);
  }

  step("values are shown as text, never as markup");
  await runQuery(page, `SELECT '<img src=x onerror="window.pwned = 1">' AS html, NULL AS nothing`);
  await expectText(page.locator("#history-table tbody td").first(), '<img src=x onerror="window.pwned = 1">',
    "the markup shown as text", QUERY_TIMEOUT);
  const injected = await page.evaluate(() => [document.querySelectorAll("#history-table img").length, window.pwned]);
  if (injected[0] !== 0 || injected[1] !== undefined) throw new Error(`markup was interpreted: ${injected}`);
  await expectText(page.locator("#history-table tbody td").nth(1), "NULL", "a NULL");

  step("a statement that changes something is refused, with the reason");
  await runQuery(page, "DROP VIEW journal");
  await expectText(page.getByTestId("error"), /DROP is not one of them$/, "the error shown");

  step("the limit applies");
  await page.getByLabel("Most rows", { exact: true }).fill("2");
  await runQuery(page, `SELECT message_id FROM queue_history WHERE queue = '${config.queue}' ORDER BY message_id`);
  await expectText(summary, /^2 rows in [\d.]+ ms \(more rows than the limit: the first 2 shown\)$/,
    "the summary of a truncated result", QUERY_TIMEOUT);
  await page.screenshot({ path: config.screenshot, fullPage: true });
}

async function main() {
  let browser;
  let page;
  const result = { ok: false, problems };
  try {
    browser = await launchChromium(chromium, config.chromium);
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    page = await context.newPage();
    page.setDefaultTimeout(TIMEOUT);
    page.on("pageerror", (err) => problems.push(`uncaught: ${err.message}`));
    page.on("console", (msg) => {
      // the session asked before logging in (401) and the refused statement (422) are
      // expected: the steps check what the page made of them
      if (msg.type() === "error" && !/status of (401|422) /.test(msg.text())) problems.push(`console: ${msg.text()}`);
    });
    await run(page);
    if (problems.length) throw new Error(`the page reported errors: ${problems.join("; ")}`);
    result.ok = true;
  } catch (err) {
    result.step = progress.step;
    result.error = err.message;
    if (page) {
      try {
        result.notices = await page.evaluate(() => ["error", "status", "history-summary"]
          .map((id) => document.getElementById(id))
          .filter((el) => el && !el.hidden).map((el) => `${el.id}: ${el.textContent}`));
        if (config.failureScreenshot) await page.screenshot({ path: config.failureScreenshot, fullPage: true });
      } catch (_) { /* the page is gone */ }
    }
  } finally {
    if (browser) await browser.close();
  }
  log(`@@result ${JSON.stringify(result)}`);
  process.exit(result.ok ? 0 : 1);
}

main();
