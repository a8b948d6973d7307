"""Durable declares leave nothing to the cyclic garbage collector.

Every durable change goes through the configuration writer and back to the
event loop; if what it leaves behind forms reference cycles, thousands of
declares pile it up for the young-generation collection, which then frees it
all at once while the event loop waits.
"""

from __future__ import annotations

import asyncio
import gc
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from broker.errors import BrokerError
from broker.messaging.namespace import Namespace
from broker.messaging.stored_changes import Deferral
from broker.model.messaging_objects import NamespaceRecords
from lakehouse.config_store import DeltaConfigurationStore

DECLARES = 20


class _Vhost:
    id = "vh"


def test_durable_declares_leave_no_cyclic_garbage(tmp_path: Path) -> None:
    store = DeltaConfigurationStore(str(tmp_path))
    store.open()
    namespace = Namespace("v")
    namespace.listeners.append(NamespaceRecords(_Vhost(), store))  # type: ignore[arg-type]
    errors: list[BrokerError | None] = []

    async def declare(name: str) -> None:
        declared = asyncio.get_running_loop().create_future()

        def done(result: Any, error: BrokerError | None) -> None:
            errors.append(error)
            declared.set_result(None)

        namespace.when_stored(lambda: namespace.declare_queue(name, durable=True), done)
        await declared

    async def scenario() -> None:
        for n in range(DECLARES):
            await declare(f"q-{n}")

    gc.collect()
    gc.disable()
    try:
        asyncio.run(scenario())
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        left = [type(o).__name__ for o in gc.garbage if isinstance(o, (Future, Deferral))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
        store.close()
    assert errors == [None] * DECLARES and len(namespace.queues) >= DECLARES
    assert left == []
