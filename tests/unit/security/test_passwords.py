"""Password hashing and the password file."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from broker.errors import ConfigurationError
from broker.security.passwords import PasswordFile, UserEntry, hash_password, verify_password


def test_hash_is_salted_and_verifies() -> None:
    first, second = hash_password("s3cret"), hash_password("s3cret")
    assert first != second  # a random salt each time
    assert "s3cret" not in first
    assert first.startswith("scrypt$16384$8$1$")
    assert verify_password("s3cret", first) and verify_password("s3cret", second)
    assert not verify_password("s3cret!", first)
    assert not verify_password("", first)


def test_cheaper_parameters_are_recorded_in_the_hash() -> None:
    encoded = hash_password("pw", n=2 ** 10, r=4, p=1)
    assert encoded.split("$")[1:4] == ["1024", "4", "1"]
    assert verify_password("pw", encoded)


@pytest.mark.parametrize("encoded", [
    "", "plain-text-password", "md5$abc", "scrypt$16384$8$1$notbase64!$xx",
    "scrypt$1000$8$1$AAAA$AAAA",  # n not a power of two
    "scrypt$1073741824$8$1$AAAA$AAAA",  # would need gigabytes
    "scrypt$16384$8$1$AAAA$",
])
def test_malformed_hashes_never_verify(encoded: str) -> None:
    assert verify_password("anything", encoded) is False


def test_file_holds_no_plaintext_and_is_private(tmp_path: Path) -> None:
    passwords = PasswordFile(tmp_path / "sub" / "passwords")
    passwords.add_user("alice", "wonderland", ["default"])
    content = passwords.path.read_text()
    assert "wonderland" not in content
    document = json.loads(content)
    assert document["users"]["alice"]["virtualHosts"] == ["default"]
    assert verify_password("wonderland", document["users"]["alice"]["password"])
    assert stat.S_IMODE(passwords.path.stat().st_mode) == 0o600
    assert [p.name for p in passwords.path.parent.iterdir()] == ["passwords"]  # no temp left


def test_add_change_remove(tmp_path: Path) -> None:
    passwords = PasswordFile(tmp_path / "passwords")
    assert passwords.load() == {} and not passwords.exists()
    passwords.add_user("bob", "one")
    with pytest.raises(ConfigurationError, match="user 'bob' already exists"):
        passwords.add_user("bob", "two")
    before = passwords.load()["bob"].password
    passwords.change_password("bob", "two")
    after = passwords.load()["bob"].password
    assert before != after and verify_password("two", after)
    passwords.remove_user("bob")
    assert passwords.load() == {}
    with pytest.raises(ConfigurationError, match="no user 'bob'"):
        passwords.remove_user("bob")
    with pytest.raises(ConfigurationError, match="no user 'bob'"):
        passwords.change_password("bob", "x")


def test_empty_password_or_name_is_refused(tmp_path: Path) -> None:
    passwords = PasswordFile(tmp_path / "passwords")
    with pytest.raises(ConfigurationError, match="must not be empty"):
        passwords.add_user("carol", "")
    with pytest.raises(ConfigurationError, match="non-empty"):
        passwords.add_user("", "pw")


def test_malformed_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "passwords"
    path.write_text("guest:guest\n")
    with pytest.raises(ConfigurationError, match="is malformed"):
        PasswordFile(path).load()


def test_save_round_trip(tmp_path: Path) -> None:
    passwords = PasswordFile(tmp_path / "passwords")
    users = {"a": UserEntry("h1", []), "b": UserEntry("h2", ["v1", "v2"])}
    passwords.save(users)
    assert passwords.load() == users
    assert passwords.stamp() is not None


def test_a_file_from_before_roles_makes_guest_the_administrator(tmp_path: Path) -> None:
    path = tmp_path / "passwords"
    old = {"users": {"guest": {"password": hash_password("guest"), "virtualHosts": []},
                     "alice": {"password": hash_password("a"), "virtualHosts": []}}}
    path.write_text(json.dumps(old))
    users = PasswordFile(path).load()
    assert (users["guest"].administrator, users["alice"].administrator) == (True, False)
    # once written, the roles are explicit: revoking guest's sticks
    PasswordFile(path).set_administrator("guest", False)
    assert not PasswordFile(path).load()["guest"].administrator
    assert json.loads(path.read_text())["users"]["alice"]["administrator"] is False


def test_an_administrator_flag_that_is_not_a_boolean_is_malformed(tmp_path: Path) -> None:
    path = tmp_path / "passwords"
    path.write_text(json.dumps({"users": {"a": {"password": "x", "administrator": "yes"}}}))
    with pytest.raises(ConfigurationError, match="malformed"):
        PasswordFile(path).load()
