"""Broker-J's group file: ``<group>.users = user1,user2`` lines, ``#`` comments.

Only users are members (not other groups); user names cannot hold commas.
:func:`parse` reads the text into group -> members, :func:`format_groups`
writes it back (comments are not kept, as Broker-J does not keep them).
"""

from __future__ import annotations

from collections.abc import Mapping

from broker.security.acl_file import LINE_BREAK, LineError

SUFFIX = ".users"


class GroupFileError(LineError):
    """A line of a group file that cannot be read."""


def parse(text: str, source: str = "") -> dict[str, frozenset[str]]:
    """Group name -> member user names."""
    groups: dict[str, frozenset[str]] = {}
    for number, raw in enumerate(LINE_BREAK.split(text), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, sep, value = line.partition(":")
        key = key.strip()
        if not sep:
            raise GroupFileError(f"expected '<group>{SUFFIX}=<users>', found '{line}'", number,
                                 source)
        if not key.endswith(SUFFIX) or key == SUFFIX:
            raise GroupFileError(f"'{key}' does not name a group's users ('<group>{SUFFIX}')",
                                 number, source)
        name = key[:-len(SUFFIX)]
        members = frozenset(u.strip() for u in value.split(",") if u.strip())
        groups[name] = groups.get(name, frozenset()) | members
    return groups


def format_groups(groups: Mapping[str, frozenset[str] | set[str]]) -> str:
    lines = [f"{name}{SUFFIX}={','.join(sorted(members))}" for name, members in sorted(groups.items())]
    return "\n".join(lines) + ("\n" if lines else "")


def groups_of(groups: Mapping[str, frozenset[str]], user: str) -> frozenset[str]:
    return frozenset(name for name, members in groups.items() if user in members)
