// What the browser checks share: step logging, waiting for a condition, reading and
// expecting texts.  `progress.step` is the step a failure is reported in.

export const progress = { step: "start" };

export function log(message) {
  process.stdout.write(`${message}\n`);
}

export function step(name) {
  progress.step = name;
  log(`step: ${name}`);
}

// The waiting helpers, with `timeout` (ms) as their default.
export function waiting(timeout) {
  // Waits until fn() returns a truthy value; fails with `what` and the last value seen.
  async function until(what, fn, limit = timeout) {
    const deadline = Date.now() + limit;
    let last;
    for (;;) {
      try {
        last = await fn();
        if (last) return last;
      } catch (err) {
        last = err.message;
      }
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last seen: ${JSON.stringify(last)})`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  async function textOf(locator) {
    return ((await locator.textContent({ timeout: 1000 })) || "").trim();
  }

  async function expectText(locator, expected, what, limit = timeout) {
    const matches = (text) => (expected instanceof RegExp ? expected.test(text) : text === expected);
    await until(`${what} to be ${expected}`, async () => {
      const text = await textOf(locator);
      return matches(text) ? text : false;
    }, limit);
  }

  return { until, textOf, expectText };
}

// Debian's headless Chromium through playwright-core; this machine reaches no Google
// service, so Chromium is kept from trying.
export async function launchChromium(chromium, executablePath) {
  return chromium.launch({
    executablePath,
    headless: true,
    args: ["--disable-gpu", "--disable-background-networking", "--disable-component-update",
      "--disable-sync", "--disable-quic", "--no-first-run", "--disable-dev-shm-usage"],
  });
}
