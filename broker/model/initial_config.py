"""The initial configuration: the file a broker's configuration store is seeded from.

As in Broker-J, the configuration file (``conf/config.json``, or
``--config FILE``) is the *initial configuration*: the broker-level objects
it describes -- the Broker, its ports, authentication providers and virtual
host nodes -- are written to the broker's configuration store the first time
the broker starts with that store empty, and from then on the store is the
configuration; management changes it.  The file's top-level ``context`` is
different: it is never stored and supplies context defaults at every start.

:func:`seed` decides, for an opened store, whether the stored configuration
is used, or the file's is written (first start, or ``--overwrite-config``).

The default file is ``conf/config.json`` at the top of the source tree: the
one file users read and copy.  The package reaches it through
``broker/model/default_config.json``, a symbolic link to it, so it is found
with :mod:`importlib.resources` from a checkout, an editable install, and a
wheel (which stores the link's target as a regular file).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from broker.errors import ConfigurationError
from broker.model.config_store import ConfigurationRecord, DurableConfigurationStore
from broker.model.persistence import records_from_tree
from broker.model.system_store import STORE_PATH_VARIABLE

DEFAULT_CONFIG_RESOURCE = "default_config.json"
REPOSITORY_CONFIG = Path(__file__).resolve().parents[2] / "conf" / "config.json"
DEFAULT_SOURCE = "the default configuration (conf/config.json)"

#: categories whose children live in a store of their own, never in the broker's
KEPT_ELSEWHERE = frozenset({"VirtualHostNode", "AuthenticationProvider"})


@dataclass(frozen=True)
class InitialConfiguration:
    """A configuration file, read: its context defaults and its Broker object."""

    #: how logs and errors name the file
    source: str
    #: the top-level ``context``: defaults at every start, never stored
    context: dict[str, str] = field(default_factory=dict)
    #: the Broker's attributes and children, as written (``${...}`` unexpanded)
    broker: Mapping[str, Any] = field(default_factory=dict)

    def records(self) -> list[ConfigurationRecord]:
        """The records the store is seeded with (fresh ids where the file gives none)."""
        return records_from_tree("Broker", self.broker, stop_at=KEPT_ELSEWHERE)


def read_initial_configuration(config_path: str | None) -> InitialConfiguration:
    """Read ``config_path`` (None: the default configuration).

    Raises :class:`ConfigurationError` for a file that cannot be read or is
    not a JSON object with an object ``context``.
    """
    data = read_configuration(config_path)
    defaults = data.pop("context", {})
    if not isinstance(defaults, Mapping):
        raise ConfigurationError("the configuration's 'context' must be an object")
    return InitialConfiguration(source=config_path or DEFAULT_SOURCE,
                                context={k: str(v) for k, v in defaults.items()},
                                broker=data)


def read_configuration(config_path: str | None) -> dict[str, Any]:
    """The JSON object in ``config_path``, or the default configuration."""
    if config_path is None:
        text, source = default_configuration_text(), "default configuration"
    else:
        try:
            text, source = Path(config_path).read_text(encoding="utf-8"), config_path
        except OSError as exc:
            raise ConfigurationError(f"cannot read configuration {config_path}:"
                                     f" {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{source}: invalid JSON at line {exc.lineno} column"
                                 f" {exc.colno}: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ConfigurationError(f"{source}: the configuration must be a JSON object")
    return data


def default_configuration_text() -> str:
    """conf/config.json, through the package's link to it (see module docstring)."""
    packaged = resources.files("broker.model").joinpath(DEFAULT_CONFIG_RESOURCE)
    try:
        text = packaged.read_text(encoding="utf-8")
    except OSError:
        text = ""
    if text.lstrip().startswith("{"):
        return text
    # A checkout without symbolic links holds the link's target path as text.
    return REPOSITORY_CONFIG.read_text(encoding="utf-8")


# -- seeding -------------------------------------------------------------------------

class Seeding(enum.Enum):
    """What :func:`seed` did with the store."""

    #: the store was empty: the initial configuration was written to it
    SEEDED = "seeded"
    #: the store held a configuration: it is used, the file only gives context
    RECOVERED = "recovered"
    #: ``--overwrite-config``: the stored configuration was replaced by the file's
    OVERWRITTEN = "overwritten"
    #: the store was empty and there was nothing to seed it with
    EMPTY = "empty"


@dataclass(frozen=True)
class SeedResult:
    seeding: Seeding
    #: the store's records after seeding, parents first
    records: list[ConfigurationRecord]
    #: the records this start wrote (to be withdrawn if they cannot be opened)
    written: list[ConfigurationRecord]


def seed(store: DurableConfigurationStore, initial: InitialConfiguration | None, *,
         overwrite: bool = False, where: str = "the broker's configuration store") -> SeedResult:
    """Use the opened ``store``'s configuration, or write the initial one to it.

    The store is written when it is empty, or when ``overwrite`` is set and
    there is an initial configuration: then the stored records are removed
    first (if the broker dies in between, the store is empty and the next
    start seeds it again).  A store that holds anything but one Broker at its
    top is refused: it is not a broker's configuration (a virtual host node's
    store at the same place, for instance); ``where`` names it in the error.
    """
    stored = store.recover()
    check_broker_records(stored, where)
    if stored and not (overwrite and initial is not None):
        return SeedResult(Seeding.RECOVERED, stored, [])
    if initial is None:
        return SeedResult(Seeding.EMPTY, stored, [])
    written = initial.records()
    if stored:
        store.remove([record.id for record in stored])
    store.save(written)
    return SeedResult(Seeding.OVERWRITTEN if stored else Seeding.SEEDED, store.recover(), written)


def check_broker_records(records: list[ConfigurationRecord], where: str) -> None:
    """Raise unless the top-level records are exactly one Broker (or there are none)."""
    top = [record for record in records if record.parent_id is None]
    foreign = sorted({record.category for record in top if record.category != "Broker"})
    if foreign:
        raise ConfigurationError(
            f"{where} holds {', '.join(foreign)} records, not a broker's configuration:"
            f" is it a virtual host node's store? Point {STORE_PATH_VARIABLE} elsewhere"
            " (-D name=value), or move that node's data away")
    if len(top) > 1:
        raise ConfigurationError(f"{where} holds {len(top)} Broker records; a broker has one")
