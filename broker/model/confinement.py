"""What management may name and where it may make the broker write.

Objects created or changed through the model's API (``create_child``,
``set_attributes``: what management does) are held to two rules the
operator's own configuration is not (the configuration file, ``-D``, the
environment, and what was stored from them are trusted, and are opened
without these checks):

* **Names.**  No control characters (NUL included) in the name of a
  configured object; and for an object with a path attribute (a virtual host
  node, whose ``storePath`` defaults to ``${deltamq.data_dir}/${this:name}``;
  a password file provider) no ``/`` or ``\\``, and not ``.`` or ``..``: a
  name must never climb out of the directory it is joined to.
* **Paths.**  An attribute declared with ``path=True`` must resolve to a
  place strictly inside one of the *path roots*: the data directory
  (``deltamq.data_dir``) and whatever the operator adds in
  ``deltamq.path_roots`` (comma-separated directories, or URI prefixes such
  as ``s3://bucket/deltamq``).  The roots are resolved from the operator's
  sources only -- ``-D``, the environment, the configuration file's
  top-level ``context`` -- never from the ``context`` of an object, which
  management may change.  A change of some object's ``context`` that would
  move a path attribute below it elsewhere is refused alike.  Nor may the
  place be, be inside or hold one already in use (the broker's configuration
  store, another node's store, a password file): two stores in one directory
  would overwrite each other.

Local paths are compared after resolving symbolic links and ``..`` (relative
ones from the working directory, as the stores open them); a link inside
the data directory that leads out of it leads out.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Mapping, Sequence
from urllib.parse import unquote, urlsplit

from broker.errors import ConfigurationError

#: extra path roots the operator allows (comma-separated); the data directory always is one
PATH_ROOTS_VARIABLE = "deltamq.path_roots"
DATA_DIR_VARIABLE = "deltamq.data_dir"


def check_name(name: str, label: str, *, joined_to_paths: bool) -> None:
    """Refuse a name with control characters, or (``joined_to_paths``) one that is not a
    single path component."""
    for character in name:
        if unicodedata.category(character) == "Cc":
            raise ConfigurationError(f"{label}: attribute 'name' must not contain control"
                                     f" characters (found U+{ord(character):04X})")
    if not joined_to_paths:
        return
    if "/" in name or "\\" in name:
        raise ConfigurationError(f"{label}: attribute 'name' must not contain '/' or '\\'"
                                 " (it names a directory of the data directory)")
    if name in (".", ".."):
        raise ConfigurationError(f"{label}: attribute 'name' must not be '.' or '..'")


def check_path(value: str, roots: Sequence[str], label: str, attribute: str) -> None:
    """Refuse ``value`` unless it lies strictly inside one of ``roots``."""
    if "\x00" in value:
        raise ConfigurationError(f"{label}: attribute '{attribute}' must not contain NUL")
    if any(_inside(value, root) for root in roots):
        return
    listed = ", ".join(f"'{root}'" for root in roots)
    raise ConfigurationError(
        f"{label}: attribute '{attribute}' is '{value}', which is outside the data directory;"
        f" management may only use places inside {listed} (the operator adds others in"
        f" context variable {PATH_ROOTS_VARIABLE} on the command line, in the environment or"
        " in the configuration file)")


def check_apart(value: str, taken: Mapping[str, str], label: str, attribute: str) -> None:
    """Refuse ``value`` if it is, is inside or holds a place already in use (``taken``:
    place -> what it is, "the storePath of VirtualHostNode 'x'"): two stores in one directory, or a file inside a store, would
    overwrite each other."""
    for place, owner in taken.items():
        if _same(value, place):
            how = "is"
        elif _inside(value, place):
            how = "is inside"
        elif _inside(place, value):
            how = "holds"
        else:
            continue
        raise ConfigurationError(f"{label}: attribute '{attribute}' is '{value}', which {how}"
                                 f" {owner} ('{place}')")


def parse_roots(data_dir: str, extra: str) -> list[str]:
    """The path roots: the data directory, then the operator's ``deltamq.path_roots``."""
    roots = [data_dir] if data_dir.strip() else []
    roots.extend(part.strip() for part in extra.split(",") if part.strip())
    return roots


def _remote(text: str) -> bool:
    """A URI of object storage (``s3://...``); ``file://`` URIs are local paths."""
    scheme = urlsplit(text).scheme
    return len(scheme) > 1 and "://" in text and scheme != "file"


def _local(text: str) -> str:
    return unquote(urlsplit(text).path) if text.startswith("file://") else text


def _same(one: str, other: str) -> bool:
    if _remote(one) or _remote(other):
        return one.rstrip("/") == other.rstrip("/")
    return os.path.realpath(_local(one)) == os.path.realpath(_local(other))


def _inside(value: str, root: str) -> bool:
    if _remote(value) or _remote(root):
        if not (_remote(value) and _remote(root)):
            return False
        segments = urlsplit(value).path.split("/")
        if ".." in segments or "." in segments:
            return False
        return value.rstrip("/").startswith(root.rstrip("/") + "/")
    place, base = os.path.realpath(_local(value)), os.path.realpath(_local(root))
    return place != base and os.path.commonpath([place, base]) == base
