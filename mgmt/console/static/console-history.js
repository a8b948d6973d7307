// DeltaMQ web console, the History page: read-only Spark SQL over the broker's journal and
// configuration views, run by the warm Spark Connect server (`deltamq spark serve`) through
// POST /api/latest/sql, the result shown as a table.  Built with console.js's helpers
// (window.DeltaMQConsole); every value is shown as text, never as markup.
"use strict";

(() => {
  const C = window.DeltaMQConsole;
  const { $, get, post, act, element, show } = C;

  const EXAMPLES = [
    ["Messages per queue",
      "SELECT vhost, queue, count(*) AS messages, count(settled_at) AS settled,\n" +
      "       count_if(outcome = 'dead_lettered') AS dead_lettered\n" +
      "FROM queue_history\nGROUP BY vhost, queue\nORDER BY messages DESC"],
    ["Latest messages",
      "SELECT queue, message_id, routing_key, CAST(body AS STRING) AS body, enqueued_at, outcome\n" +
      "FROM queue_history\nORDER BY enqueued_at DESC"],
    ["Live messages", "SELECT queue, message_id, routing_key, enqueued_at, redelivered\nFROM live_messages\nORDER BY enqueued_at"],
    ["Dead letters", "SELECT queue, message_id, reason, delivery_count, dead_lettered_at\nFROM dead_letters\nORDER BY dead_lettered_at DESC"],
    ["Configuration",
      "SELECT node, category, get_json_object(attributes, '$.name') AS name, changed_at\n" +
      "FROM configuration\nORDER BY node, category, name"],
    ["Views", "SHOW VIEWS"],
  ];

  // Whether a server answers for the broker's data directory: said above the form.
  async function loadServer() {
    const box = $("history-server");
    try {
      const status = await get("sql");
      show(box, status.available
        ? `Queries run on the Spark Connect server at ${status.server}, over ${status.dataDir}.`
        : `No Spark Connect server serves ${status.dataDir || "the broker's data directory"}:`
          + ` start one with \`deltamq spark serve --data-dir ${status.dataDir || "DIR"}\`.`);
      box.dataset.available = String(status.available);
    } catch (err) {
      show(box, `The History page is not available: ${err.message}`);
      box.dataset.available = "false";
    }
  }

  function text(value) {
    if (value === null || value === undefined) return "NULL";
    return typeof value === "object" ? JSON.stringify(value) : String(value);
  }

  function render(result) {
    const table = $("history-table");
    table.tHead.rows[0].replaceChildren(...result.columns.map((c) =>
      element("th", { scope: "col", text: c.name, title: c.type, "data-type": c.type })));
    table.tBodies[0].replaceChildren(...result.rows.map((row) =>
      element("tr", { "data-testid": "history-row" }, ...row.map((value) =>
        element("td", { text: text(value), className: value === null ? "muted" : undefined })))));
    const rows = result.rows.length;
    show($("history-summary"), `${rows} row${rows === 1 ? "" : "s"} in ${result.elapsedMs} ms`
      + (result.truncated ? ` (more rows than the limit: the first ${rows} shown)` : ""));
  }

  async function runQuery(event) {
    event.preventDefault();
    await act(event.submitter || $("history-run"), async () => {
      const query = $("history-query").value;
      if (!query.trim()) throw new Error("Write a query first, or pick an example.");
      $("history-summary").textContent = "Running…";
      try {
        render(await post("sql", { query, limit: Number($("history-limit").value) }));
      } catch (err) {
        $("history-summary").textContent = "";
        throw err;
      }
    });
  }

  function chooseExample() {
    const found = EXAMPLES.find(([name]) => name === $("history-example").value);
    if (found) $("history-query").value = found[1];
  }

  C.addTab("history", [loadServer]);
  document.addEventListener("DOMContentLoaded", () => {
    C.fillSelect($("history-example"), EXAMPLES.map(([name]) => [name, name]), { keep: false });
    $("history-example").addEventListener("change", chooseExample);
    chooseExample();
    $("history-form").addEventListener("submit", runQuery);
  });
})();
