"""Rewriting data files in bounded pieces: what compaction and history retention hold at once.

Compaction merges up to ``target_file_size`` (64 MiB) of files into one, and
retention rewrites a file without the rows of messages that ended long ago.
Reading all of those rows into one table first, then writing it, held the
whole set twice over (the decoded rows, then the writer's buffers): a
compaction round of twelve 5 MB files peaked at 273 MiB, a retention round
at 608 MiB.  Here the rows are streamed instead: each source file is read a
batch of :data:`REWRITE_ROWS` rows at a time (pyarrow's Parquet reader, row
group by row group), each batch is written out as a row group of the new
file and ``fdatasync``'ed, and of the columns the ``add`` action's
statistics need (``message_id``, ``at``) only the min and max of each piece
written are kept.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .log_commit import LogCommits

__all__ = ["REWRITE_ROWS", "RewrittenFile", "conform", "read_batches", "read_columns", "write_batches_synced"]

#: rows read, written and fdatasync'ed at a time (one row group of the new file)
REWRITE_ROWS = 16_384



class RewrittenFile:
    """What :func:`write_batches_synced` wrote: its rows, size, and the bounds of the kept columns."""

    def __init__(self, rows: int, bounds: pa.Table, null_counts: dict[str, int], size: int) -> None:
        self.rows = rows
        #: the kept columns' min and max of each piece written (two rows a piece): what the
        #: ``add`` action's statistics are taken from, not every row (a compacted file of
        #: settlements has millions)
        self.bounds = bounds
        self.null_counts = null_counts
        self.size = size

    def add_action(self, table: LogCommits, name: str, *, now_ms: int) -> dict[str, Any]:
        """The ``add`` action (``dataChange=false``) of the file, written as ``name`` in ``table``."""
        action = table.add_action(name, self.bounds, data_change=False, now_ms=now_ms, size=self.size)
        stats = json.loads(action["stats"])
        stats["numRecords"] = self.rows
        if "nullCount" in stats:
            stats["nullCount"] = {column: self.null_counts[column] for column in stats["nullCount"]}
        action["stats"] = json.dumps(stats, separators=(",", ":"))
        return action


def _bounds(piece: pa.RecordBatch, keep: list[str], schema: pa.Schema) -> pa.Table:
    """Two rows: the min and the max of each of ``keep`` in ``piece`` (nulls when all are null)."""
    columns = []
    for name in keep:
        found = pc.min_max(piece.column(name))
        columns.append(pa.array([found["min"].as_py(), found["max"].as_py()], schema.field(name).type))
    return pa.table(columns, schema=pa.schema([schema.field(name).with_nullable(True) for name in keep]))


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` in ``schema``: the columns a later schema added (a metadata-only ADD COLUMN)
    are null in the rows of files written before."""
    columns = []
    for field in schema:
        index = batch.schema.get_field_index(field.name)
        column = batch.column(index) if index >= 0 else pa.nulls(batch.num_rows, field.type)
        columns.append(column if column.type == field.type else column.cast(field.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def read_batches(path: Path, schema: pa.Schema, rows: int | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of the data file at ``path`` in ``schema``, ``rows`` (:data:`REWRITE_ROWS`) at a time."""
    for batch in read_columns(path, None, rows):
        yield conform(batch, schema)


def read_columns(path: Path, columns: Iterable[str] | None,
                 rows: int | None = None) -> Iterator[pa.RecordBatch]:
    """Those of ``columns`` (None: all) the data file at ``path`` has, ``rows`` at a time."""
    source = pq.ParquetFile(path)
    try:
        names = None if columns is None else [c for c in columns if c in source.schema_arrow.names]
        yield from source.iter_batches(batch_size=rows or REWRITE_ROWS, columns=names, use_threads=False)
    finally:
        source.close()


def write_batches_synced(batches: Iterable[pa.RecordBatch], target: Path, schema: pa.Schema, *,
                         compression: str, keep: list[str], rows: int | None = None) -> RewrittenFile:
    """Write ``batches`` as one Parquet file at ``target``, durable when this returns.

    Row groups of at most ``rows`` (:data:`REWRITE_ROWS`) rows, each ``fdatasync``'ed as it is
    written, never one large flush: on ext4 (``data=ordered``) an appender's
    small fsync that lands while many megabytes of another file are being
    written back waits for all of them, and the appender's commits are what
    publishers' confirms wait for.  Batches are cut and gathered into
    row groups of ``rows`` rows.  ``keep``: the columns whose bounds are returned (statistics).
    """
    rows = rows or REWRITE_ROWS
    bounds: list[pa.Table] = []
    null_counts = dict.fromkeys(keep, 0)
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
                start = 0
                while start < batch.num_rows:         # fill the row group in progress, then write it
                    piece = batch.slice(start, rows - pending_rows)
                    start += piece.num_rows
                    pending.append(piece)
                    pending_rows += piece.num_rows
                    total += piece.num_rows
                    bounds.append(_bounds(piece, keep, schema))
                    for name in keep:
                        null_counts[name] += piece.column(name).null_count
                    if pending_rows == rows:
                        flush()
            flush()
        sink.flush()
        os.fsync(sink.fileno())
        size = sink.tell()
    empty = pa.schema([schema.field(name).with_nullable(True) for name in keep]).empty_table()
    return RewrittenFile(total, pa.concat_tables([empty, *bounds]), null_counts, size)
