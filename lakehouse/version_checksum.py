"""Version checksum files (``_delta_log/<version>.crc``) for the commits we write.

Delta Spark reads a version's protocol and metadata from its checksum file
when there is one; without it, every query after a new version first runs a
Spark job over the last checkpoint and the commits after it to find them.
The journal gets a new version every few milliseconds under load, so a
Spark query for a message that was just confirmed nearly always pays for
that job (bench D3: one of three jobs per query, about a fifth of its
time).  delta-rs writes no checksum files; the Delta protocol makes them
optional, so a reader must work without them, and a missing or unreadable
one only costs that job again.

:class:`TableChecksum` keeps the figures a checksum holds -- the table's live
files and their sizes, its protocol and metadata -- up to date from the
commits themselves: its own, and any another writer made in between (the
upkeep process's compactions), read through :func:`~lakehouse.log_state.read_commit`.  It starts from a
:class:`~lakehouse.log_state.LogState` of the table.

A checksum is written atomically (a temporary file renamed into place) but
not fsynced: it only saves readers work, and after a crash a version without
one is still read correctly.  What is written is a :class:`ChecksumFigures`:
the figures of one version, frozen with that version's number, so a file
written later (the journal's writer writes them from a thread of their own,
:mod:`lakehouse.checksum_writer`) never claims another version's figures.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .log_state import LogState, read_commit

__all__ = ["TableChecksum", "ChecksumFigures", "checksum_file"]


def checksum_file(log_dir: Path, version: int) -> Path:
    return log_dir / f"{version:020d}.crc"


class TableChecksum:
    """What the checksum of the newest version of a local Delta table says."""

    def __init__(self, log_dir: Path, version: int, sizes: dict[str, int],
                 metadata: dict[str, Any], protocol: dict[str, Any]) -> None:
        self.log_dir = log_dir
        #: the version the figures below describe
        self.version = version
        #: live data files: path (as in the log) -> size in bytes
        self.sizes = sizes
        self.table_size = sum(sizes.values())
        self.metadata = metadata
        self.protocol = protocol

    @classmethod
    def of(cls, state: LogState) -> TableChecksum:
        """The checksum of the version ``state`` has read."""
        assert state.metadata is not None and state.protocol is not None, "load() the state first"
        sizes = {path: int(add.get("size") or 0) for path, add in state.adds.items()}
        return cls(state.log_dir, state.version, sizes, state.metadata, state.protocol)

    def advance(self, version: int, actions: list[dict[str, Any]]) -> None:
        """Commit ``version`` holds ``actions``: apply the commits before it first, then them."""
        while self.version < version - 1:
            self._apply(read_commit(self.log_dir, self.version + 1))
            self.version += 1
        if version <= self.version:
            raise ValueError(f"version {version} is not after {self.version}")
        self._apply(actions)
        self.version = version

    def _apply(self, actions: list[dict[str, Any]]) -> None:
        for action in actions:
            if (add := action.get("add")) is not None:
                size = int(add.get("size") or 0)
                self.table_size += size - self.sizes.get(add["path"], 0)
                self.sizes[add["path"]] = size
            elif (remove := action.get("remove")) is not None:
                self.table_size -= self.sizes.pop(remove["path"], 0)
            elif (metadata := action.get("metaData")) is not None:
                self.metadata = metadata
            elif (protocol := action.get("protocol")) is not None:
                self.protocol = protocol

    def figures(self) -> ChecksumFigures:
        """The figures of :attr:`version`, frozen (the metadata and protocol actions are
        replaced by later commits, never changed in place, so they are shared, not copied)."""
        return ChecksumFigures(self.log_dir, self.version, self.table_size, len(self.sizes),
                               self.metadata, self.protocol)

    def as_json(self) -> dict[str, Any]:
        """The checksum as Delta's ``VersionChecksum`` JSON (the fields a reader needs)."""
        return self.figures().as_json()

    def write(self) -> Path:
        """Write ``<version>.crc`` for :attr:`version` (atomically, not fsynced)."""
        return self.figures().write()


@dataclass(frozen=True, slots=True)
class ChecksumFigures:
    """What ``<version>.crc`` says for one version: written by :meth:`write` only for that version."""

    log_dir: Path
    version: int
    table_size: int
    num_files: int
    metadata: dict[str, Any]
    protocol: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        """The checksum as Delta's ``VersionChecksum`` JSON (the fields a reader needs)."""
        return {"tableSizeBytes": self.table_size, "numFiles": self.num_files,
                "numMetadata": 1, "numProtocol": 1,
                "metadata": self.metadata, "protocol": self.protocol}

    def write(self) -> Path:
        """Write ``<version>.crc`` (atomically: a temporary file renamed into place; not fsynced)."""
        target = checksum_file(self.log_dir, self.version)
        temp = self.log_dir / f".deltamq-{uuid.uuid4()}.crc.tmp"
        try:
            temp.write_text(json.dumps(self.as_json(), separators=(",", ":")) + "\n")
            os.replace(temp, target)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        return target
