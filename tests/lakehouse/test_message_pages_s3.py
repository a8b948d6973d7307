"""MessagePages on object storage: a journal in a bucket of a real S3 API server (moto), read back by id."""

from __future__ import annotations

from typing import Any

import pytest

from broker.messaging.namespace import Namespace
from lakehouse.delta_table import AppendOnlyTable
from lakehouse.journal import DeltaMessageJournal
from lakehouse.journal_schema import JOURNAL_SCHEMA
from lakehouse.message_pages import MessagePages, PagesMissing

from .snapshot_support import commit
from .test_message_pages import expected, message_0_9_1, message_1_0, without_time
from .test_object_storage import BUCKET, keys, s3

__all__ = ["s3"]                                     # the fixture, imported for the tests below

pytestmark = pytest.mark.slow


def test_a_journal_in_a_bucket_reads_back_by_id_and_after_compaction(s3: Any) -> None:
    location = f"s3://{BUCKET}/pages-node/journal"
    ns = Namespace("v")
    journal = DeltaMessageJournal(location, "v")
    journal.open()
    ns.journal = journal
    queue = ns.declare_queue("q", durable=True)[0]
    sent = []
    for n in range(3):                               # three commits: three data files
        for k in range(n * 10, n * 10 + 10):
            message = message_1_0(k) if k % 3 == 0 else message_0_9_1(k)
            queue.enqueue(message)
            sent.append(message)
        commit(journal)
    journal.close()
    assert len([key for key in keys(s3, "pages-node/journal/") if key.endswith(".parquet")]) >= 3
    pages = MessagePages(location, cache_bytes=0)
    assert without_time(pages.read([m.journal_id for m in sent])) == expected(sent)
    with pytest.raises(PagesMissing) as raised:
        pages.read([31])
    assert raised.value.ids == [31]
    table = AppendOnlyTable(location, JOURNAL_SCHEMA, name="journal")
    assert table.compact_remote(1 << 30) == 3
    table.vacuum_remote(0)                           # the reader's files are gone from the bucket
    refreshes = pages.refreshes
    assert without_time(pages.read([m.journal_id for m in sent])) == expected(sent)
    assert pages.refreshes > refreshes
