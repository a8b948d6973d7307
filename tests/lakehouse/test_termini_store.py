"""AMQP 1.0 link termini in the ``link_termini`` Delta table (Link Registry design)."""

from __future__ import annotations

import json
from pathlib import Path

from broker.messaging.termini import LinkRole, MemoryTerminusStore, TerminusRecord
from broker.model import load_system_config
from lakehouse.delta_table import AppendOnlyTable
from lakehouse.termini_store import TERMINI_SCHEMA, DeltaTerminusStore

SOURCE = {"address": "orders", "durable": 1, "expiry-policy": "never", "distribution-mode": "move"}
TARGET = {"address": "billing", "durable": 2}


def _round_trip(store: DeltaTerminusStore | MemoryTerminusStore) -> None:
    store.open()
    store.save([TerminusRecord(LinkRole.SENDING, "client-1", "orders-link", SOURCE),
                TerminusRecord(LinkRole.RECEIVING, "client-1", "orders-link", TARGET),
                TerminusRecord(LinkRole.SENDING, "client-2", "gone", SOURCE)])
    # the same tuple on the same side replaces (a resumed link's terminus)
    store.save([TerminusRecord(LinkRole.SENDING, "client-1", "orders-link", {**SOURCE, "address": "v2"})])
    store.remove([(LinkRole.SENDING, "client-2", "gone")])


def test_termini_survive_reopening_the_delta_table(tmp_path: Path) -> None:
    _round_trip(DeltaTerminusStore(tmp_path))
    again = DeltaTerminusStore(tmp_path)
    again.open()
    got = {r.key: dict(r.terminus) for r in again.recover()}
    assert got == {(LinkRole.SENDING, "client-1", "orders-link"): {**SOURCE, "address": "v2"},
                   (LinkRole.RECEIVING, "client-1", "orders-link"): TARGET}
    rows = AppendOnlyTable(tmp_path / "link_termini", TERMINI_SCHEMA).read(
        "SELECT role, link_name, op FROM t ORDER BY seq").to_pylist()
    assert [r["op"] for r in rows] == ["save", "save", "save", "save", "remove"]


def test_memory_termini_behave_the_same(tmp_path: Path) -> None:
    store = MemoryTerminusStore()
    _round_trip(store)
    assert {r.key for r in store.recover()} == {(LinkRole.SENDING, "client-1", "orders-link"),
                                                (LinkRole.RECEIVING, "client-1", "orders-link")}


def test_a_delta_node_has_its_link_termini_table(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "name": "b", "authenticationproviders": [{"name": "anon", "type": "Anonymous"}],
        "ports": [{"name": "amqp", "port": "5999", "authenticationProvider": "anon"}],
        "virtualhostnodes": [{"name": "node", "type": "delta", "storePath": str(tmp_path / "node")}],
    }))
    system = load_system_config(str(config), {"deltamq.data_dir": str(tmp_path)})
    [node] = system.broker.virtual_host_nodes
    assert isinstance(node.termini, DeltaTerminusStore)
    node.termini.save([TerminusRecord(LinkRole.RECEIVING, "c", "l", TARGET)])
    system.close()
    assert (tmp_path / "node" / "link_termini" / "_delta_log").is_dir()
    system = load_system_config(str(config), {"deltamq.data_dir": str(tmp_path)})
    [node] = system.broker.virtual_host_nodes
    assert [r.key for r in node.termini.recover()] == [(LinkRole.RECEIVING, "c", "l")]
    system.close()
