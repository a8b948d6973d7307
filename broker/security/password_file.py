"""The PasswordFile authentication provider: users with salted hashes in a file.

On open the provider reads its file (creating it with ``guest``/``guest`` the
first time, as RabbitMQ and Broker-J ship a guest user) and shows every user
as a User child.  Users added, changed or deleted through the model are
written to the file; edits made by ``deltamq user ...`` while the broker runs
are noticed at the next login (the file's mtime and size are compared),
so a new user can log in without a restart.

Hash verification costs ~50 ms of CPU (scrypt, see
:mod:`broker.security.passwords`), which the event loop cannot spend on every
connection: after one successful verification the provider remembers an
HMAC, under a random per-process key, of (stored hash, password), and later
logins with the same password are checked against it in constant time.  A
changed password changes the stored hash, so a remembered value never
outlives it.

Setting a password (``deltamq user``, or management creating or changing a
User) also keeps its SCRAM keys (:mod:`broker.security.scram`), with the
iteration count of context variable ``deltamq.auth.scram.iteration_count``
(default 4096): the provider offers SCRAM-SHA-256 and SCRAM-SHA-1 before
PLAIN and AMQPLAIN (:mod:`broker.security.scram_login`).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from collections.abc import Mapping
from typing import Any

from broker.errors import ConfigurationError
from broker.model.attributes import attribute
from broker.model.authentication import AuthenticationProvider, User, refused
from broker.model.configured_object import ConfiguredObject, State
from broker.security import scram
from broker.security.passwords import DEFAULT_ADMINISTRATOR, PasswordFile, UserEntry, \
    hash_password, scram_keys, verify_password
from broker.security.principal import Principal
from broker.security.scram import ScramCredential

log = logging.getLogger(__name__)

DEFAULT_USER = (DEFAULT_ADMINISTRATOR, "guest")
#: the context variable giving the SCRAM iteration count of passwords set from now on
#: (Broker-J's qpid.auth.scram.iteration_count)
SCRAM_ITERATIONS_VARIABLE = "deltamq.auth.scram.iteration_count"


class PasswordFileAuthenticationProvider(AuthenticationProvider):
    type_name = "PasswordFile"

    path = attribute(str, default="${deltamq.data_dir}/passwords", path=True,
                     description="The password file (created with user guest/guest if missing;"
                                 " set over management: inside the data directory)")
    allow_anonymous = attribute(bool, default=False,
                                description="Also offer SASL ANONYMOUS")

    def __init__(self, parent: ConfiguredObject | None, attributes: Mapping[str, Any],
                 *, id: str | None = None) -> None:
        super().__init__(parent, attributes, id=id)
        self._file: PasswordFile | None = None
        self._stamp: tuple[int, int] | None = None
        self._cache_key = secrets.token_bytes(32)
        self._verified: dict[str, bytes] = {}
        self._dummy_hash: str | None = None
        #: SCRAM keys by user and mechanism, as last read from the file
        self._scram: dict[str, dict[str, ScramCredential]] = {}
        #: SCRAM keys of passwords just encoded, by their hash, until the user is written
        self._new_scram: dict[str, dict[str, ScramCredential]] = {}

    @property
    def password_file(self) -> PasswordFile:
        if self._file is None or str(self._file.path) != self.path:
            self._file = PasswordFile(self.path)
        return self._file

    @property
    def sasl_mechanisms(self) -> list[str]:
        # SCRAM needs stored keys: a file whose users all predate them (an older release
        # wrote it) offers SCRAM to no one, so clients that prefer it (Qpid JMS) use PLAIN
        self.refresh()                          # a stat: the file changes under deltamq user
        has_keys = any(self._scram.values()) or not self.password_file.exists()
        mechanisms = [*scram.MECHANISMS] if has_keys else []
        mechanisms += ["PLAIN", "AMQPLAIN"]
        if self.allow_anonymous:
            mechanisms.append("ANONYMOUS")
        return mechanisms

    @property
    def allows_anonymous(self) -> bool:
        return bool(self.allow_anonymous)

    # -- lifecycle -----------------------------------------------------------------

    def on_open(self) -> None:
        self._file = PasswordFile(self.path)
        if not self._file.exists():
            name, password = DEFAULT_USER
            log.warning("%s: creating %s with the default user '%s'", self.label,
                        self._file.path, name)
            # an administrator, as RabbitMQ's guest is; it logs in from loopback only
            self._file.save({name: UserEntry(hash_password(password), administrator=True,
                                             scram=scram_keys(password, self.scram_iterations))})
        self._load_users()

    def on_close(self) -> None:
        self._verified.clear()

    # -- authentication ----------------------------------------------------------------

    def check_credentials(self, username: str, password: str, remote_host: str | None,
                          *, mechanism: str = "PLAIN") -> Principal:
        """The principal for a correct password; AuthenticationFailed otherwise.

        A wrong password and an unknown user are refused alike (same text,
        same work); only once the password is right does the loopback rule
        say why ``guest`` is refused from elsewhere, as RabbitMQ does.
        """
        self.refresh()
        user = self.user(username)
        stored = user.password if user is not None else self._dummy()
        if not self._verify(username, password, stored) or user is None:
            log.info("%s: login of '%s' from %s refused", self.label, username, remote_host)
            raise refused(mechanism)
        self.check_loopback(username, remote_host, mechanism)
        return Principal(username, self.name)

    def scram_credential(self, username: str, mechanism: str) -> ScramCredential | None:
        self.refresh()
        return self._scram.get(username, {}).get(mechanism)

    @property
    def scram_iterations(self) -> int:
        """The SCRAM iteration count for new passwords (context variable, default 4096)."""
        found = self._lookup(SCRAM_ITERATIONS_VARIABLE)
        text = self.resolve(found) if found is not None else str(scram.DEFAULT_ITERATIONS)
        try:
            count = int(text)
        except ValueError:
            count = 0
        if not scram.MIN_ITERATIONS <= count <= scram.MAX_ITERATIONS:
            raise ConfigurationError(f"context variable {SCRAM_ITERATIONS_VARIABLE} must be an"
                                     f" integer from {scram.MIN_ITERATIONS} to"
                                     f" {scram.MAX_ITERATIONS}, not {text!r}")
        return count

    def _verify(self, username: str, password: str, stored: str) -> bool:
        tag = hmac.new(self._cache_key, stored.encode() + b"\x00" + password.encode("utf-8"),
                       hashlib.sha256).digest()
        remembered = self._verified.get(username)
        if remembered is not None and hmac.compare_digest(remembered, tag):
            return True
        if not verify_password(password, stored):
            return False
        self._verified[username] = tag
        return True

    def _dummy(self) -> str:
        if self._dummy_hash is None:
            self._dummy_hash = hash_password(secrets.token_urlsafe(16))
        return self._dummy_hash

    # -- users and the file ----------------------------------------------------------------

    def refresh(self) -> None:
        """Re-read the file if it changed since it was last read."""
        if self.state is State.ACTIVE and self.password_file.stamp() != self._stamp:
            self._load_users()

    def _load_users(self) -> None:
        stamp = self.password_file.stamp()
        entries = self.password_file.load()
        self._stamp = stamp
        self._scram = {name: entry.scram for name, entry in entries.items()}
        for user in self.users:
            if user.name not in entries:
                self._verified.pop(user.name, None)
                user._delete_tree()
        for name, entry in entries.items():
            existing = self.user(name)
            if existing is None:
                user = User(self, {"name": name, "password": entry.password,
                                   "virtualHosts": entry.virtual_hosts,
                                   "administrator": entry.administrator})
                self._attach(user)
                user.open()
                self._notify_child(user, added=True)
            elif _entry(existing) != entry:
                existing._actual.update(password=entry.password,
                                        virtualHosts=entry.virtual_hosts,
                                        administrator=entry.administrator)
                existing._values = existing._resolve()

    def encode_password(self, password: str) -> str:
        encoded = hash_password(password)
        self._new_scram[encoded] = scram_keys(password, self.scram_iterations)
        return encoded

    def user_added(self, user: User) -> None:
        self._write(user.name, _entry(user))

    def user_changed(self, user: User) -> None:
        self._write(user.name, _entry(user))

    def user_removed(self, user: User) -> None:
        self._verified.pop(user.name, None)
        self._write(user.name, None)

    def _write(self, name: str, entry: UserEntry | None) -> None:
        """Change one user in the file, keeping edits others made meanwhile."""
        entries = self.password_file.load()
        if entry is None:
            entries.pop(name, None)
        else:
            old = entries.get(name)
            keys = self._new_scram.pop(entry.password, None)
            if keys is not None:
                entry.scram = keys
            elif old is not None and old.password == entry.password:
                entry.scram = old.scram             # the password did not change
            entries[name] = entry
        self.password_file.save(entries)
        self._stamp = None  # re-read at the next login: picks up others' edits too


def _entry(user: User) -> UserEntry:
    """How the file keeps ``user``."""
    return UserEntry(user.password, list(user.virtual_hosts), bool(user.administrator))
