"""Which Delta tables DeltaMQ may write: the protocol and table features it honours.

A Delta table's ``protocol`` action says what a writer must implement to
write it without corrupting it: a legacy writer version (1-6) implies a
fixed set of features, version 7 lists them (``writerFeatures``); readers
likewise (``minReaderVersion`` 1-2, or 3 with ``readerFeatures``).  A table
that Delta Spark upgraded -- deletion vectors enabled, column mapping, CHECK
constraints, generated or identity columns -- must not be written by a
writer that ignores those features: a compaction that rewrites a file
without applying its deletion vector brings deleted rows back; an append
under column mapping writes columns no reader finds; a row that breaks a
constraint goes in unchecked.

DeltaMQ writes its tables in four ways: blind appends (one ``add`` with
``dataChange=true``), compaction and history retention (files rewritten,
``dataChange=false``), checkpoints (from :class:`~lakehouse.log_state.LogState`)
and vacuum / log clean-up.  :func:`check_table` is run on every open and on
every change of protocol or metadata another writer commits; it raises
:class:`UnsupportedTable` -- naming the table, the feature and what to do --
unless every feature is one of:

* **honoured**: ``appendOnly`` (DeltaMQ only appends), ``changeDataFeed``
  (appends need no change files; rewrites carry ``dataChange=false``, which
  change-data readers skip), ``timestampNtz`` (DeltaMQ's own columns are all
  zoned; a column it does not write is null), ``vacuumProtocolCheck``
  (DeltaMQ vacuums only tables it has checked);
* **honoured while unused**: the feature is in the protocol but nothing in
  the table uses it, which leaves a writer nothing to do -- ``invariants``
  (no column with ``delta.invariants``), ``checkConstraints`` (no
  ``delta.constraints.*`` property), ``generatedColumns`` (no column with
  ``delta.generationExpression``), ``identityColumns`` (no
  ``delta.identity.*`` column), ``columnMapping`` (mode ``none``) and
  ``deletionVectors`` (``delta.enableDeletionVectors`` not true and no file
  carrying a deletion vector).

Everything else -- row tracking, domain metadata, v2 checkpoints, in-commit
timestamps, clustering, type widening, Iceberg compatibility, variant and
collation types, column defaults, checkpoint protection, and any feature or
protocol version this module does not know -- is refused outright.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from broker.errors import StoreFailed

__all__ = ["UnsupportedTable", "check_table", "table_features", "HONOURED", "HONOURED_WHILE_UNUSED"]

#: features DeltaMQ's writes are correct under, whatever the table holds
HONOURED = frozenset({"appendOnly", "changeDataFeed", "timestampNtz", "vacuumProtocolCheck"})
#: features DeltaMQ's writes are correct under as long as nothing in the table uses them
HONOURED_WHILE_UNUSED = frozenset({"invariants", "checkConstraints", "generatedColumns",
                                   "identityColumns", "columnMapping", "deletionVectors"})

#: the features a legacy protocol version implies (Delta protocol, "Table Features")
_LEGACY_WRITER = {
    1: (),
    2: ("appendOnly", "invariants"),
    3: ("appendOnly", "invariants", "checkConstraints"),
    4: ("appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"),
    5: ("appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns",
        "columnMapping"),
    6: ("appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns",
        "columnMapping", "identityColumns"),
}
_LEGACY_READER: dict[int, tuple[str, ...]] = {1: (), 2: ("columnMapping",)}

#: what an operator can do about a feature in use (Delta Spark SQL on ``delta.`<location>```)
_REMEDY = {
    "deletionVectors": "turn them off and rewrite the files that have one, with Delta Spark:"
                       " ALTER TABLE {ref} SET TBLPROPERTIES ('delta.enableDeletionVectors'=false);"
                       " REORG TABLE {ref} APPLY (PURGE)",
    "columnMapping": "DeltaMQ writes columns by their names; restore the table from before column"
                     " mapping was enabled, or move the node to a new storePath",
    "checkConstraints": "drop the constraints (ALTER TABLE {ref} DROP CONSTRAINT <name>):"
                        " DeltaMQ does not evaluate them",
    "invariants": "DeltaMQ does not evaluate column invariants; restore the table from before"
                  " they were added, or move the node to a new storePath",
    "generatedColumns": "DeltaMQ does not compute generated columns; restore the table from"
                        " before they were added, or move the node to a new storePath",
    "identityColumns": "DeltaMQ does not assign identity values; restore the table from before"
                       " the identity column was added, or move the node to a new storePath",
}
_DROP_FEATURE = ("remove it with Delta Spark (ALTER TABLE {ref} DROP FEATURE {feature} TRUNCATE"
                 " HISTORY), restore the table from before it was added, or move the node to a"
                 " new storePath")


class UnsupportedTable(StoreFailed):
    """A Delta table uses a protocol version or feature DeltaMQ does not write correctly.

    Nothing was written to it.  :attr:`table` names the table, :attr:`feature`
    the feature (or ``"protocol"`` for an unknown protocol version).
    """

    def __init__(self, table: str, location: str, feature: str, why: str, remedy: str) -> None:
        super().__init__(f"Delta table '{table}' at {location} uses {why}, which DeltaMQ does not"
                         f" write correctly; it refuses to write to the table. To use it: {remedy}")
        self.table = table
        self.location = location
        self.feature = feature


def table_features(protocol: dict[str, Any]) -> tuple[frozenset[str], frozenset[str]]:
    """The (reader, writer) features a ``protocol`` action requires, legacy versions expanded.

    Raises :class:`ValueError` for a protocol version the Delta protocol does not define.
    """
    reader_version = int(protocol.get("minReaderVersion", 1))
    writer_version = int(protocol.get("minWriterVersion", 1))
    if reader_version == 3:
        reader = frozenset(protocol.get("readerFeatures") or ())
    elif reader_version in _LEGACY_READER:
        reader = frozenset(_LEGACY_READER[reader_version])
    else:
        raise ValueError(f"reader version {reader_version}")
    if writer_version == 7:
        writer = frozenset(protocol.get("writerFeatures") or ())
    elif writer_version in _LEGACY_WRITER:
        writer = frozenset(_LEGACY_WRITER[writer_version])
    else:
        raise ValueError(f"writer version {writer_version}")
    return reader, writer


def check_table(table: str, location: str, protocol: dict[str, Any] | None,
                metadata: dict[str, Any] | None, *, deletion_vectors: bool = False) -> None:
    """Raise :class:`UnsupportedTable` unless DeltaMQ writes this table correctly.

    ``protocol`` and ``metadata`` are the table's ``protocol`` and ``metaData``
    actions as the log holds them; ``deletion_vectors`` says whether a live
    file of the table carries a deletion vector.
    """
    ref = f"delta.`{location}`"
    if protocol is None or metadata is None:
        return                                   # a table still being created: nothing to honour
    try:
        reader, writer = table_features(protocol)
    except ValueError as exc:
        raise UnsupportedTable(table, location, "protocol",
                               f"Delta protocol {exc} (reader {protocol.get('minReaderVersion')},"
                               f" writer {protocol.get('minWriterVersion')})",
                               "a newer DeltaMQ, or a table written by an older Delta") from None
    in_use = dict(_features_in_use(metadata, deletion_vectors))
    for feature in sorted(reader | writer):
        if feature in HONOURED:
            continue
        if feature in HONOURED_WHILE_UNUSED:
            if feature in in_use:
                raise UnsupportedTable(table, location, feature,
                                       f"table feature '{feature}' ({in_use[feature]})",
                                       _REMEDY[feature].format(ref=ref))
            continue
        raise UnsupportedTable(table, location, feature,
                               f"table feature '{feature}' (protocol reader"
                               f" {protocol.get('minReaderVersion')}, writer"
                               f" {protocol.get('minWriterVersion')})",
                               _DROP_FEATURE.format(ref=ref, feature=feature))


def _features_in_use(metadata: dict[str, Any], deletion_vectors: bool) -> Iterator[tuple[str, str]]:
    """(feature, what uses it) for each feature the table's metadata (or files) put to use."""
    configuration: dict[str, str] = metadata.get("configuration") or {}
    if deletion_vectors:
        yield "deletionVectors", "files with deletion vectors"
    elif configuration.get("delta.enableDeletionVectors", "false").lower() == "true":
        yield "deletionVectors", "delta.enableDeletionVectors=true"
    mode = configuration.get("delta.columnMapping.mode", "none").lower()
    if mode != "none":
        yield "columnMapping", f"delta.columnMapping.mode={mode}"
    constraints = sorted(key for key in configuration if key.startswith("delta.constraints."))
    if constraints:
        yield "checkConstraints", ", ".join(constraints)
    fields = list(_fields(json.loads(metadata.get("schemaString") or "{}").get("fields") or ()))
    for feature, key in (("invariants", "delta.invariants"),
                         ("generatedColumns", "delta.generationExpression"),
                         ("identityColumns", "delta.identity.")):
        columns = [name for name, meta in fields if any(k.startswith(key) for k in meta)]
        if columns:
            yield feature, f"column {', '.join(columns)} has {key.rstrip('.')}"


def _fields(fields: Iterable[dict[str, Any]], prefix: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(dotted column name, its metadata) of every column, nested struct fields included."""
    for field in fields:
        name = prefix + str(field.get("name"))
        yield name, field.get("metadata") or {}
        kind = field.get("type")
        if isinstance(kind, dict) and kind.get("type") == "struct":
            yield from _fields(kind.get("fields") or (), name + ".")
