"""``${name}`` context variable expansion.

Broker-J's rule, kept: a value (or a default) may refer to context variables;
a variable's own value may refer to others, so expansion is recursive; a
variable that refers back to itself, directly or not, is a configuration
error, as is one that nothing defines.  Where a variable is *looked up*
(object, ancestors, command line, environment, defaults) is the caller's
business: :func:`expand` only takes a lookup function.

``${this:attr}`` is passed to the lookup like any other name; the configured
object answers it with its own attribute (Broker-J's ``${this:name}``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from broker.errors import ConfigurationError

REFERENCE = re.compile(r"\$\{([^${}]+)\}")

Lookup = Callable[[str], "str | None"]


def has_reference(value: Any) -> bool:
    """True if ``value`` (a string, or a list/dict holding strings) mentions ``${...}``."""
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, list):
        return any(has_reference(item) for item in value)
    if isinstance(value, dict):
        return any(has_reference(item) for item in value.values())
    return False


def expand(value: Any, lookup: Lookup, owner: str = "") -> Any:
    """Expand every ``${name}`` in ``value`` (strings inside lists/dicts too).

    Raises :class:`ConfigurationError` naming the variable when it is undefined
    or circular; ``owner`` (e.g. ``Port 'amqp': attribute 'port'``) prefixes it.
    """
    if isinstance(value, str):
        return _expand_text(value, lookup, owner, ())
    if isinstance(value, list):
        return [expand(item, lookup, owner) for item in value]
    if isinstance(value, dict):
        return {key: expand(item, lookup, owner) for key, item in value.items()}
    return value


def _expand_text(text: str, lookup: Lookup, owner: str, chain: tuple[str, ...]) -> str:
    if "${" not in text:
        return text

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in chain:
            cycle = " -> ".join((*chain, name))
            raise ConfigurationError(f"{_prefix(owner)}context variable '{name}' refers to"
                                     f" itself ({cycle})")
        found = lookup(name)
        if found is None:
            raise ConfigurationError(f"{_prefix(owner)}context variable '{name}' is not defined")
        return _expand_text(found, lookup, owner, (*chain, name))

    return REFERENCE.sub(substitute, text)


def _prefix(owner: str) -> str:
    return f"{owner}: " if owner else ""


def environment_value(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """A context variable from the process environment.

    The exact name first (``deltamq.amqp_port`` is a legal variable name for
    ``env`` and docker-compose), then, for dotted names only, the shell-friendly
    spelling ``DELTAMQ_AMQP_PORT``.  Undotted names are not upper-cased, so a
    variable called ``user`` never picks up ``$USER`` by accident.
    """
    env = os.environ if environ is None else environ
    if name in env:
        return env[name]
    if "." in name:
        shell_name = re.sub(r"[^A-Za-z0-9]", "_", name).upper()
        return env.get(shell_name)
    return None
