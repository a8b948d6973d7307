// DeltaMQ web console, time-travel replay: the form under a queue's messages that publishes
// again what the journal says was enqueued on the queue between two times or two journal
// versions (the queue's replayMessages operation; docs/replay.md).  Built with the helpers
// console.js shares through window.DeltaMQConsole; loaded after it (both deferred).
"use strict";

(() => {
  const C = window.DeltaMQConsole;
  const { state, $, get, post, act, showStatus, fillSelect, show, enc } = C;

  // "42" is a journal version; anything else is a time (ISO 8601, as the REST API takes it).
  function bound(text, side, body) {
    const value = text.trim();
    if (!value) return;
    if (/^[0-9]+$/.test(value)) body[`${side}Version`] = Number(value);
    else body[`${side}Time`] = value;
  }

  // The fields of the chosen way: through each message's own exchange, another one, or a queue.
  function showWay() {
    const way = $("replay-into").value;
    $("replay-exchange-field").hidden = way !== "exchange";
    $("replay-key-field").hidden = way !== "exchange";
    $("replay-queue-field").hidden = way !== "queue";
  }

  async function fillTargets() {
    const exchanges = await get(`exchange/${enc(state.node)}/${enc(state.vhost)}`);
    exchanges.sort((a, b) => a.name.localeCompare(b.name));
    fillSelect($("replay-exchange"), exchanges.filter((x) => !x.internal)
      .map((x) => [x.name === "<default>" ? "" : x.name, x.name === "<default>" ? "(default exchange)" : x.name]));
    fillSelect($("replay-queue"), state.queues.map((q) => [q.name, q.name]));
  }

  function summary(queue, answer) {
    const count = answer.replayed;
    const parts = [`Replayed ${count} message${count === 1 ? "" : "s"} of ${queue}`
      + ` (journal version ${answer.journalVersion}).`];
    if (answer.unroutable.length) parts.push(`Routed nowhere: ${answer.unroutable.join(", ")}.`);
    if (answer.refused.length) parts.push(`Refused by a queue: ${answer.refused.join(", ")}.`);
    if (answer.missing.length) parts.push(`Bodies gone from the journal: ${answer.missing.join(", ")}.`);
    return parts.join(" ");
  }

  async function replay(event) {
    event.preventDefault();
    const queue = state.browsing;
    if (!queue) return;
    await act(event.submitter || $("replay-submit"), async () => {
      const body = {};
      bound($("replay-from").value, "from", body);
      bound($("replay-to").value, "to", body);
      const way = $("replay-into").value;
      if (way === "exchange") {
        body.exchange = $("replay-exchange").value;
        const key = $("replay-routing-key").value;
        if (key) body.routingKey = key;
      } else if (way === "queue") {
        body.destination = $("replay-queue").value;
      }
      const limit = $("replay-limit").value.trim();
      if (limit) body.limit = Number(limit);
      const answer = await post(
        `queue/${enc(state.node)}/${enc(state.vhost)}/${enc(queue)}/replayMessages`, body);
      const text = summary(queue, answer);
      show($("replay-result"), text);
      showStatus(text);
    });
  }

  function start() {
    $("replay-into").addEventListener("change", showWay);
    $("replay").addEventListener("toggle", () => {
      if ($("replay").open) act(null, fillTargets);
    });
    $("replay-form").addEventListener("submit", replay);
    showWay();
  }

  document.addEventListener("DOMContentLoaded", start);
})();
