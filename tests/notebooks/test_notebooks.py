"""Every notebook in notebooks/ runs (nbclient) against data a real broker journaled, and shows it.

A broker is started as a user starts it (``deltamq serve``, as
tests/integration/conftest.py starts it; a broker of its own, so the
numbers are this test's alone); pika publishes to
it with confirms, consumes, acknowledges and rejects into a dead-letter queue,
and a message-TTL queue expires into the same one; then the broker is stopped
(SIGTERM: it commits what it has) and the notebooks read its data directory.

The notebooks run one after the other in one kernel, each after ``%reset -f``
(nothing of the one before is left but the modules): they share the kernel's
Spark JVM, which would otherwise start once per notebook (~5-9 s each here).
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.waiting import wait_until

from tests.integration.conftest import URL_ENV, DeltaMQProcess
from tests.integration.support import BrokerEndpoint

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")
pytest.importorskip("ipykernel")

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
ORDERS, WORK, TTL, DLQ = "nb.orders", "nb.work", "nb.ttl", "nb.dead"


def notebook_paths() -> list[Path]:
    return sorted(NOTEBOOKS.glob("*.ipynb"))


# -- stored notebooks -----------------------------------------------------------------

def test_the_four_notebooks_are_there() -> None:
    assert [p.name for p in notebook_paths()] == [
        "consumer_lag.ipynb", "dead_letters.ipynb", "latency.ipynb", "queue_history.ipynb"]


@pytest.mark.parametrize("path", notebook_paths(), ids=lambda p: p.name)
def test_notebooks_are_stored_without_outputs(path: Path) -> None:
    nb = nbformat.read(str(path), as_version=4)
    nbformat.validate(nb)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code, "a notebook without code"
    dirty = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
             and (cell.outputs or cell.execution_count is not None)]
    assert not dirty, f"{path.name}: cells {dirty} keep outputs or execution counts (strip them)"
    assert set(nb.metadata) <= {"kernelspec", "language_info"}, f"{path.name}: metadata {sorted(nb.metadata)}"
    parameters = [cell for cell in code if "parameters" in cell.metadata.get("tags", ())]
    assert len(parameters) == 1 and "DELTAMQ_DATA_DIR" in parameters[0].source


# -- data a broker journaled ----------------------------------------------------------

def _publish(ch: Any, queue: str, count: int, **props: Any) -> None:
    import pika

    for i in range(count):
        ch.basic_publish("", queue, f"{queue} {i}".encode(),
                         pika.BasicProperties(delivery_mode=2, **props), mandatory=True)


def _message_count(ch: Any, queue: str) -> int:
    return int(ch.queue_declare(queue, passive=True).method.message_count)


def _journal(broker: BrokerEndpoint) -> dict[str, int]:
    """Publishes, consumes, acknowledges, rejects and expires messages; returns the counts made."""
    with broker.pika() as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(DLQ, durable=True)
        ch.queue_declare(ORDERS, durable=True)
        ch.queue_declare(WORK, durable=True, arguments={"x-dead-letter-exchange": "",
                                                         "x-dead-letter-routing-key": DLQ})
        ch.queue_declare(TTL, durable=True, arguments={"x-message-ttl": 100, "x-dead-letter-exchange": "",
                                                        "x-dead-letter-routing-key": DLQ})
        _publish(ch, ORDERS, 30)
        _publish(ch, WORK, 12)
        # 20 orders delivered, then a confirmed publish: its commit journals those
        # deliveries before they are acknowledged (a 'deliver' row each)
        tags = []
        for _ in range(20):
            method, _props, _body = ch.basic_get(ORDERS)
            assert method is not None
            tags.append(method.delivery_tag)
        _publish(ch, TTL, 3)
        for tag in tags:
            ch.basic_ack(tag)
        # work: 7 acknowledged, 5 rejected into the dead-letter queue
        for i in range(12):
            method, _props, _body = ch.basic_get(WORK)
            assert method is not None
            if i % 12 < 7:
                ch.basic_ack(method.delivery_tag)
            else:
                ch.basic_reject(method.delivery_tag, requeue=False)
        wait_until(lambda: _message_count(ch, DLQ) == 8 and _message_count(ch, TTL) == 0, 30,
                   what="5 rejected and 3 expired messages in the dead-letter queue")
        # one dead letter handled (acknowledged), 7 left
        method, _props, _body = ch.basic_get(DLQ)
        assert method is not None
        ch.basic_ack(method.delivery_tag)
        assert _message_count(ch, DLQ) == 7
    return {"orders": 30, "orders_acked": 20, "work_acked": 7, "rejected": 5, "expired": 3}


@pytest.fixture(scope="module")
def data_dir() -> Iterator[Path]:
    """A data directory a stopped ``deltamq serve`` journaled :func:`_journal`'s traffic in."""
    if os.environ.get(URL_ENV):
        pytest.skip("the notebooks read DeltaMQ's own tables")
    broker = DeltaMQProcess()
    broker.start()
    try:
        assert broker.proc is not None
        _journal(BrokerEndpoint(host="127.0.0.1", port=broker.amqp_port))
        broker.proc.send_signal(signal.SIGTERM)         # as a service manager stops it: commits, exits
        assert broker.proc.wait(60) == 0, broker.log_tail()
        yield broker.dir / "data"
    finally:
        broker.stop()                                   # kills what is left; removes the directory


# -- running them -----------------------------------------------------------------------

def _texts(nb: Any) -> str:
    out = []
    for cell in nb.cells:
        for output in cell.get("outputs", ()):
            if output.output_type == "stream":
                out.append(output.text)
            elif output.output_type in ("execute_result", "display_data"):
                out.append(output.get("data", {}).get("text/plain", ""))
    return "".join(out)


def _figures(nb: Any) -> int:
    return sum(1 for cell in nb.cells for output in cell.get("outputs", ())
               if output.output_type == "display_data" and "image/png" in output.get("data", {}))


class SharedKernel:
    """One IPython kernel (a child process of this one) that runs notebook after notebook."""

    def __init__(self, cwd: Path) -> None:
        from jupyter_client.manager import KernelManager

        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=str(cwd))

    def run(self, nb: Any) -> Any:
        """Execute ``nb`` (a copy) after a ``%reset -f``; return it executed (CellExecutionError on error)."""
        nb = nbformat.from_dict(json.loads(json.dumps(nb)))
        nb.cells.insert(0, nbformat.v4.new_code_cell("%reset -f"))
        client = nbclient.NotebookClient(nb, km=self.km, timeout=600, allow_errors=False)
        try:
            client.execute()
        finally:
            if client.kc is not None:
                client.kc.stop_channels()
        return nb

    def close(self) -> None:
        self.km.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def executed(data_dir: Path) -> Iterator[tuple[dict[str, Any], SharedKernel]]:
    """Every notebook, run against :func:`data_dir`, and the seconds each took."""
    with pytest.MonkeyPatch.context() as env:          # the kernel inherits this process's environment
        env.setenv("DELTAMQ_DATA_DIR", str(data_dir))
        env.delenv("SPARK_REMOTE", raising=False)
        env.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
        kernel = SharedKernel(NOTEBOOKS)
        try:
            results: dict[str, Any] = {}
            for path in notebook_paths():
                started = time.monotonic()
                results[path.name] = kernel.run(nbformat.read(str(path), as_version=4))
                print(f"{path.name}: {time.monotonic() - started:.1f} s")
            yield results, kernel
        finally:
            kernel.close()


def _line(text: str, queue: str, marker: str) -> str:
    """What the one line about ``queue`` containing ``marker`` says after ``<vhost>/<queue>: ``."""
    found = [line for line in text.splitlines() if re.match(rf"\S+/{re.escape(queue)}: ", line) and marker in line]
    assert len(found) == 1, f"no single line on {queue} with {marker!r} in:\n{text}"
    return found[0].split(": ", 1)[1]


def test_every_notebook_runs_and_plots(executed: tuple[dict[str, Any], SharedKernel]) -> None:
    results, _kernel = executed
    assert sorted(results) == [p.name for p in notebook_paths()]
    figures = {name: _figures(nb) for name, nb in results.items()}
    assert figures == {"consumer_lag.ipynb": 2, "dead_letters.ipynb": 3, "latency.ipynb": 1,
                       "queue_history.ipynb": 2}
    assert not [name for name, nb in results.items() if "Traceback" in _texts(nb)]


def test_queue_history_counts_what_the_broker_did(executed: tuple[dict[str, Any], SharedKernel]) -> None:
    text = _texts(executed[0]["queue_history.ipynb"])
    assert _line(text, ORDERS, "enqueued") == "30 enqueued, 20 acked, 0 dead-lettered, 0 otherwise settled, 10 live"
    assert _line(text, WORK, "enqueued") == "12 enqueued, 7 acked, 5 dead-lettered, 0 otherwise settled, 0 live"
    assert _line(text, TTL, "enqueued") == "3 enqueued, 0 acked, 3 dead-lettered, 0 otherwise settled, 0 live"
    assert _line(text, DLQ, "enqueued") == "8 enqueued, 1 acked, 0 dead-lettered, 0 otherwise settled, 7 live"
    assert _line(text, ORDERS, "msg/s in").endswith(" msg/s out, backlog at the end 10")
    assert _line(text, WORK, "msg/s in").endswith(" msg/s out, backlog at the end 0")


def test_latency_covers_the_acknowledged_messages(executed: tuple[dict[str, Any], SharedKernel]) -> None:
    text = _texts(executed[0]["latency.ipynb"])
    assert _line(text, ORDERS, "acked").startswith("20 acked messages; end to end p50 ")
    assert _line(text, WORK, "acked").startswith("7 acked messages; ")
    assert _line(text, DLQ, "acked").startswith("1 acked messages; ")
    assert not [line for line in text.splitlines() if f"/{TTL}:" in line]     # nothing acknowledged there


def test_dead_letters_by_queue_reason_and_destination(executed: tuple[dict[str, Any], SharedKernel]) -> None:
    text = _texts(executed[0]["dead_letters.ipynb"])
    assert _line(text, WORK, "dead-lettered") == "5 dead-lettered (rejected 5)"
    assert _line(text, TTL, "dead-lettered") == "3 dead-lettered (expired 3)"
    copies = re.findall(rf"\S+/{re.escape(DLQ)} holds (\d+) copies of messages dead-lettered from (\S+)"
                        r" \((\w+)\), (\d+) still there; at most (\d+) deaths in that queue", text)
    assert sorted((int(n), source, reason, deaths) for n, source, reason, _live, deaths in copies) == [
        (3, TTL, "expired", "1"), (5, WORK, "rejected", "1")], text
    assert sum(int(live) for *_rest, live, _deaths in copies) == 7      # one of the 8 was acknowledged


def test_consumer_lag_shows_backlog_and_journaled_deliveries(executed: tuple[dict[str, Any], SharedKernel]) -> None:
    text = _texts(executed[0]["consumer_lag.ipynb"])
    lag = re.fullmatch(r"backlog at the end 10, peak (\d+); lag at most \d+\.\d s", _line(text, ORDERS, "backlog"))
    assert lag is not None and 10 <= int(lag.group(1)) <= 30
    assert _line(text, DLQ, "backlog").startswith("backlog at the end 7, ")
    assert _line(text, WORK, "backlog").startswith("backlog at the end 0, ")
    # the 20 orders were delivered in a commit before their acks: each has a deliver row
    assert _line(text, ORDERS, " settled (").startswith("20 settled (20 with a journaled delivery); wait p50 ")


def test_consumer_and_queue_filters(executed: tuple[dict[str, Any], SharedKernel]) -> None:
    """QUEUE narrows every figure to one queue; a CONSUMER that acknowledged nothing is a clear error."""
    kernel = executed[1]
    nb = nbformat.read(str(NOTEBOOKS / "consumer_lag.ipynb"), as_version=4)
    parameters = next(cell for cell in nb.cells if "parameters" in cell.metadata.get("tags", ()))
    source = parameters.source
    parameters.source = source + f'\nQUEUE = "{DLQ}"'
    text = _texts(kernel.run(nb))
    assert f"queue {DLQ}, consumer any: 8 messages" in text
    assert _line(text, DLQ, "backlog").startswith("backlog at the end 7, ")
    assert not [line for line in text.splitlines() if f"/{ORDERS}: " in line]
    parameters.source = source + '\nCONSUMER = "spark-drain"'
    with pytest.raises(nbclient.exceptions.CellExecutionError,
                       match="no message of queue any acknowledged by consumer spark-drain in the journal"):
        kernel.run(nb)
