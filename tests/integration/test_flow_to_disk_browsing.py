"""Looking at a lazy queue whose messages are all on disk: a draining 1.0 browser and the REST listing.

pika declares two lazy queues (``x-queue-mode``) and fills them in
transactions; once the broker has paged every message, a proton receiver
with ``distribution-mode: copy`` drains (as Qpid JMS's ``QueueBrowser``
asks whether there is more) and gets the head's messages, not an empty
answer, and the first ``getMessageInfo`` on the other queue lists its head.
"""

from __future__ import annotations

import json
import os
import urllib.request
from typing import Any

import pika
import pytest

from tests.waiting import wait_until

from .conftest import DeltaMQProcess
from .test_flow_to_disk import statistic

proton = pytest.importorskip("proton")
from proton.reactor import Copy  # noqa: E402

from .test_amqp1_0_proton import _connect  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

if os.environ.get("DELTAMQ_TEST_AMQP_URL"):
    pytest.skip("starts a broker of its own: DeltaMQ only", allow_module_level=True)

#: two page chunks: every message of the queue is paged
COUNT = 2048
DRAINED = 20


def _fill(proc: DeltaMQProcess, queue: str) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", proc.amqp_port))
    ch = conn.channel()
    ch.queue_declare(queue, durable=True, arguments={"x-queue-mode": "lazy"})
    ch.tx_select()
    for index in range(COUNT):
        ch.basic_publish("", queue, b"m%d" % index, pika.BasicProperties(
            delivery_mode=2, headers={"index": index}))
        if index % 512 == 511:
            ch.tx_commit()
    ch.tx_commit()
    conn.close()


def _get(proc: DeltaMQProcess, path: str) -> Any:
    request = urllib.request.Request(f"http://127.0.0.1:{proc.http_port}/api/latest/queue/default/default/{path}")
    request.add_header("Authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")          # guest:guest
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.load(reply)


def _all_paged(proc: DeltaMQProcess, queue: str) -> bool:
    try:
        found = _get(proc, queue)
    except OSError:                              # the HTTP port opens after the AMQP one
        return False
    attributes = found[0] if isinstance(found, list) else found
    return statistic(attributes, "messagesPagedOut") == COUNT


def test_a_draining_browser_and_the_listing_see_a_lazy_queue_that_is_all_on_disk() -> None:
    proc = DeltaMQProcess()
    proc.start()
    try:
        for queue in ("lazy-browsed", "lazy-listed"):
            _fill(proc, queue)
            wait_until(lambda q=queue: _all_paged(proc, q), 60, what=f"every message of {queue} paged")
        connection = _connect(proc.amqp_port)
        try:
            browser = connection.create_receiver("lazy-browsed", credit=0, options=Copy())
            browser.link.drain(DRAINED)
            connection.wait(lambda: browser.link.credit == 0, timeout=30, msg="the drain answered")
            # (the index from the application properties: proton's memoryview bodies of
            # buffered messages do not outlive the next receive)
            got = [browser.receive(timeout=10).properties["index"] for _ in range(DRAINED)]
            assert got == list(range(DRAINED))
            browser.close()
        finally:
            connection.close()
        infos = _get(proc, "lazy-listed/getMessageInfo?first=0&last=4")
        assert len(infos) == 5
        attributes = _get(proc, "lazy-browsed")
        attributes = attributes[0] if isinstance(attributes, list) else attributes
        assert statistic(attributes, "queueDepthMessages") == COUNT               # nothing taken
    finally:
        proc.stop()
