"""A real broker for the lakehouse tests that drive one: ``broker`` and its management ``api``.

``broker`` is `deltamq serve` started as the management tests start it
(:func:`tests.mgmt.conftest.start_broker`: free ports, waited for until HTTP
answers), one per test module; a module that needs another kind defines its
own ``broker`` fixture, which takes precedence.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.conftest import DeltaMQProcess
from tests.mgmt.conftest import Api, start_broker


@pytest.fixture(scope="module")
def broker() -> Iterator[DeltaMQProcess]:
    process = start_broker()
    yield process
    process.stop()              # teardown runs whatever the tests did


@pytest.fixture
def api(broker: DeltaMQProcess) -> Iterator[Api]:
    client = Api(broker.http_port)
    yield client
    client.close()
