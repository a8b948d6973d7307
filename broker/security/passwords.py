"""Salted password hashes and the password file that keeps them.

Hashes are scrypt (RFC 7914) with a random 16-byte salt, written as
``scrypt$N$r$p$<salt>$<key>`` (base64) so the cost can be raised later
without invalidating stored users.  Comparison is constant-time.

The password file is JSON -- ``{"users": {"guest": {"password": "<hash>",
"virtualHosts": [], "administrator": true, "scram": {...}}}}`` -- written atomically
(temporary file, fsync, rename) with mode 0600; it never holds a password in
clear.  ``administrator`` marks the users who may manage the broker itself
(:mod:`mgmt.security`); a file written before the field existed (no user has
it) makes ``guest`` the administrator, as a new file does.  Both the broker's
PasswordFile provider and ``deltamq user ...`` use :class:`PasswordFile`.

``scram`` holds, per SCRAM mechanism, the salt, iteration count, StoredKey and
ServerKey of RFC 5802 (:class:`~broker.security.scram.ScramCredential`,
base64): what a SCRAM login needs, never the password.  Setting a password
writes both the scrypt hash and the SCRAM keys; a user whose password was set
before the file kept SCRAM keys has none and logs in with PLAIN only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import os
import secrets
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from broker.errors import ConfigurationError
from broker.security import scram
from broker.security.scram import ScramCredential

log = logging.getLogger(__name__)

SCHEME = "scrypt"
#: cost parameters for new hashes: ~50 ms and 16 MiB per verification
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2 ** 14, 8, 1
SALT_BYTES = 16
KEY_BYTES = 32
#: refuse stored parameters that would make one verification a denial of service
MAX_SCRYPT_MEMORY = 64 * 1024 * 1024
#: the user a new password file holds, an administrator (who logs in from loopback only)
DEFAULT_ADMINISTRATOR = "guest"


def hash_password(password: str, *, n: int = SCRYPT_N, r: int = SCRYPT_R,
                  p: int = SCRYPT_P) -> str:
    """A new salted hash of ``password``."""
    salt = secrets.token_bytes(SALT_BYTES)
    key = _scrypt(password, salt, n, r, p)
    return "$".join((SCHEME, str(n), str(r), str(p), _b64(salt), _b64(key)))


def verify_password(password: str, encoded: str) -> bool:
    """True if ``password`` matches ``encoded``; False for a wrong password or a malformed hash."""
    try:
        scheme, n_text, r_text, p_text, salt_text, key_text = encoded.split("$")
        n, r, p = int(n_text), int(r_text), int(p_text)
        salt, expected = base64.b64decode(salt_text, validate=True), \
            base64.b64decode(key_text, validate=True)
    except (ValueError, binascii.Error):
        return False
    if scheme != SCHEME or not expected or 128 * r * (n + p + 2) > MAX_SCRYPT_MEMORY:
        return False
    try:
        actual = _scrypt(password, salt, n, r, p, len(expected))
    except ValueError:  # parameters scrypt refuses (n not a power of two...)
        return False
    return hmac.compare_digest(actual, expected)


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int, length: int = KEY_BYTES) -> bytes:
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p,
                          maxmem=MAX_SCRYPT_MEMORY + 1024 * 1024, dklen=length)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass
class UserEntry:
    """One user as the file keeps it: the hash, the virtual hosts allowed (empty: all),
    whether the user is an administrator, and the SCRAM keys by mechanism (none for a
    user whose password was set before the file kept them)."""

    password: str
    virtual_hosts: list[str] = field(default_factory=list)
    administrator: bool = False
    scram: dict[str, ScramCredential] = field(default_factory=dict, compare=False)


class PasswordFile:
    """The users of a PasswordFile provider, on disk."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def exists(self) -> bool:
        return self.path.is_file()

    def stamp(self) -> tuple[int, int] | None:
        """(mtime, size) of the file, to notice edits by ``deltamq user``; None if absent."""
        try:
            status = self.path.stat()
        except OSError:
            return None
        return status.st_mtime_ns, status.st_size

    def load(self) -> dict[str, UserEntry]:
        """Every user; an absent file has none."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise ConfigurationError(f"cannot read password file {self.path}: {exc.strerror}"
                                     ) from None
        try:
            data = json.loads(text)
            users = data["users"]
            before_roles = not any("administrator" in entry for entry in users.values())
            return {str(name): UserEntry(
                        str(entry["password"]), [str(v) for v in entry.get("virtualHosts", [])],
                        _flag(entry.get("administrator", before_roles
                                        and name == DEFAULT_ADMINISTRATOR)),
                        _scram(entry.get("scram", {})))
                    for name, entry in users.items()}
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ConfigurationError(f"password file {self.path} is malformed: {exc}") from None

    def save(self, users: Mapping[str, UserEntry]) -> None:
        """Replace the file's content atomically (readable by its owner only)."""
        document = {"users": {name: _document(entry) for name, entry in sorted(users.items())}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".passwords-")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(document, out, indent=2)
                out.write("\n")
                out.flush()
                os.fsync(out.fileno())
            os.chmod(temporary, 0o600)
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        _fsync_directory(self.path.parent)

    # -- what ``deltamq user`` does ------------------------------------------------

    def add_user(self, name: str, password: str, virtual_hosts: list[str] | None = None,
                 *, administrator: bool = False,
                 scram_iterations: int = scram.DEFAULT_ITERATIONS) -> None:
        users = self.load()
        if name in users:
            raise ConfigurationError(f"user '{name}' already exists in {self.path}")
        users[name] = UserEntry(hash_password(_checked(name, password)), list(virtual_hosts or []),
                                administrator, scram_keys(password, scram_iterations))
        self.save(users)

    def set_administrator(self, name: str, administrator: bool) -> None:
        users = self.load()
        if name not in users:
            raise ConfigurationError(f"no user '{name}' in {self.path}")
        users[name].administrator = administrator
        self.save(users)

    def change_password(self, name: str, password: str, *,
                        scram_iterations: int = scram.DEFAULT_ITERATIONS) -> None:
        users = self.load()
        if name not in users:
            raise ConfigurationError(f"no user '{name}' in {self.path}")
        users[name].password = hash_password(_checked(name, password))
        users[name].scram = scram_keys(password, scram_iterations)
        self.save(users)

    def remove_user(self, name: str) -> None:
        users = self.load()
        if users.pop(name, None) is None:
            raise ConfigurationError(f"no user '{name}' in {self.path}")
        self.save(users)


def scram_keys(password: str, iterations: int = scram.DEFAULT_ITERATIONS
               ) -> dict[str, ScramCredential]:
    """The SCRAM keys of ``password``; none (with a warning) for a password SASLprep
    forbids (RFC 4013: control characters, for one), which can then log in with PLAIN only."""
    try:
        return scram.derive_credentials(password, iterations)
    except ValueError as exc:
        log.warning("no SCRAM keys kept for this password: %s", exc)
        return {}


def _document(entry: UserEntry) -> dict[str, object]:
    document: dict[str, object] = {"password": entry.password,
                                   "virtualHosts": list(entry.virtual_hosts),
                                   "administrator": entry.administrator}
    if entry.scram:
        document["scram"] = {mechanism: credential.to_json()
                             for mechanism, credential in sorted(entry.scram.items())}
    return document


def _scram(value: object) -> dict[str, ScramCredential]:
    if not isinstance(value, dict):
        raise TypeError(f"'scram' must be an object, not {value!r}")
    return {str(mechanism): ScramCredential.from_json(credential)
            for mechanism, credential in value.items()}


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"'administrator' must be true or false, not {value!r}")
    return value


def _checked(name: str, password: str) -> str:
    if not name or "\x00" in name:
        raise ConfigurationError("a user name must be non-empty and contain no NUL")
    if not password:
        raise ConfigurationError(f"user '{name}': the password must not be empty")
    return password


def _fsync_directory(directory: Path) -> None:
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)
