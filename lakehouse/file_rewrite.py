"""Rewriting data files in bounded pieces: what compaction and history retention hold at once.

Compaction merges up to ``target_file_size`` (64 MiB) of files into one, and
retention rewrites a file without the rows of messages that ended long ago.
Reading all of those rows into one table first, then writing it, held the
whole set twice over (the decoded rows, then the writer's buffers): a
compaction round of twelve 5 MB files peaked at 273 MiB, a retention round
at 608 MiB.  Here the rows are streamed instead: each source file is read a
batch of :data:`REWRITE_ROWS` rows at a time (pyarrow's Parquet reader, row
group by row group), each batch is written out as a row group of the new
file and ``fdatasync``'ed, and only the columns the ``add`` action's
statistics need (``message_id``, ``at``) are kept for the whole file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["REWRITE_ROWS", "RewrittenFile", "conform", "read_batches", "write_batches_synced"]

#: rows read, written and fdatasync'ed at a time (one row group of the new file)
REWRITE_ROWS = 16_384



class RewrittenFile:
    """What :func:`write_batches_synced` wrote: the row count and the statistics columns."""

    def __init__(self, rows: int, stats_rows: pa.Table, size: int) -> None:
        self.rows = rows
        #: the kept columns of every row written (the ``add`` action's statistics come from them)
        self.stats_rows = stats_rows
        self.size = size


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` in ``schema``: the columns a later schema added (a metadata-only ADD COLUMN)
    are null in the rows of files written before."""
    columns = []
    for field in schema:
        index = batch.schema.get_field_index(field.name)
        column = batch.column(index) if index >= 0 else pa.nulls(batch.num_rows, field.type)
        columns.append(column if column.type == field.type else column.cast(field.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def read_batches(path: Path, schema: pa.Schema, rows: int = REWRITE_ROWS) -> Iterator[pa.RecordBatch]:
    """The rows of the data file at ``path`` in ``schema``, ``rows`` at a time."""
    source = pq.ParquetFile(path)
    try:
        for batch in source.iter_batches(batch_size=rows, use_threads=False):
            yield conform(batch, schema)
    finally:
        source.close()


def write_batches_synced(batches: Iterable[pa.RecordBatch], target: Path, schema: pa.Schema, *,
                         compression: str, keep: list[str],
                         rows: int = REWRITE_ROWS) -> RewrittenFile:
    """Write ``batches`` as one Parquet file at ``target``, durable when this returns.

    Row groups of at most ``rows`` rows, each ``fdatasync``'ed as it is
    written, never one large flush: on ext4 (``data=ordered``) an appender's
    small fsync that lands while many megabytes of another file are being
    written back waits for all of them, and the appender's commits are what
    publishers' confirms wait for.  Small batches are gathered up to
    ``rows`` first.  ``keep``: the columns returned (statistics).
    """
    kept: list[pa.RecordBatch] = []
    total = 0
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    with open(target, "wb") as sink:
        with pq.ParquetWriter(sink, schema, compression=compression) as writer:
            def flush() -> None:
                nonlocal pending, pending_rows
                if pending_rows:
                    writer.write_table(pa.Table.from_batches(pending, schema), row_group_size=rows)
                    sink.flush()
                    os.fdatasync(sink.fileno())
                pending, pending_rows = [], 0

            for batch in batches:
                for start in range(0, batch.num_rows, rows):
                    piece = batch.slice(start, rows)
                    if pending_rows + piece.num_rows > rows:
                        flush()
                    pending.append(piece)
                    pending_rows += piece.num_rows
                    total += piece.num_rows
                    kept.append(piece.select(keep))
            flush()
        sink.flush()
        os.fsync(sink.fileno())
        size = sink.tell()
    return RewrittenFile(total, pa.Table.from_batches(kept, pa.schema([schema.field(name) for name in keep])).combine_chunks(), size)
