"""The deltamq command line."""

from __future__ import annotations

import io
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from broker import cli
from broker.security.passwords import PasswordFile, verify_password


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def help_text(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        cli.main([*argv, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_serve_help_documents_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_text(["serve"], capsys)
    for option in ("--config FILE", "--data-dir DIR", "--amqp-port N", "--http-port N",
                   "-D name=value", "--log-level LEVEL"):
        assert option in text
    for documented in ("deltamq.data_dir", "deltamq.amqp_port", "deltamq.http_port",
                       "DEBUG", "conf/config.json"):
        assert documented in text


def test_top_and_user_help(capsys: pytest.CaptureFixture[str]) -> None:
    top = help_text([], capsys)
    assert "serve" in top and "user" in top
    user = help_text(["user"], capsys)
    for action in ("add", "passwd", "delete", "list"):
        assert action in user
    add = help_text(["user", "add"], capsys)
    for option in ("--password P", "--virtual-host VHOST", "--data-dir DIR", "--file PATH"):
        assert option in add


def test_no_command_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run([], capsys)
    assert code == 2 and "usage: deltamq" in err


def test_spark_group_without_a_job_prints_its_help(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from lakehouse import spark_commands

    job = types.ModuleType("fake_spark_job")

    def add_command(jobs: Any) -> None:
        jobs.add_parser("fake-job", help="a job for this test").set_defaults(run=lambda args: 7)

    job.add_command = add_command  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_spark_job", job)
    monkeypatch.setattr(spark_commands, "JOBS", ("fake_spark_job",))
    code, _, err = run(["spark"], capsys)
    assert code == 2 and "usage: deltamq spark" in err and "fake-job" in err
    code, _, _ = run(["spark", "fake-job"], capsys)
    assert code == 7


@pytest.fixture
def fake_server(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []
    module = types.ModuleType("broker.server")

    def serve(config_path: str | None, context: dict[str, str], log_level: str, *,
              overwrite_config: bool = False) -> int:
        calls.append((config_path, context, log_level, overwrite_config))
        return 3

    module.serve = serve  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "broker.server", module)
    return calls


def test_serve_passes_options_as_context(fake_server: list[tuple[Any, ...]],
                                         capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DELTAMQ_WS_PORT", raising=False)   # tests/conftest.py sets it
    code, _, _ = run(["serve", "--config", "my.json", "--data-dir", "/srv/mq",
                      "--amqp-port", "5673", "--http-port", "0", "-D", "a.b=c=d",
                      "-D", "deltamq.amqp_port=1", "--log-level", "debug"], capsys)
    assert code == 3
    assert fake_server == [("my.json", {"a.b": "c=d", "deltamq.data_dir": "/srv/mq",
                                        "deltamq.amqp_port": "5673", "deltamq.amqps_port": "0",
                                        "deltamq.ws_port": "0", "deltamq.http_port": "0"}, "DEBUG", False)]


@pytest.mark.parametrize("option", ["amqps", "ws"])
def test_the_tls_and_websocket_ports_move_aside_only_when_the_amqp_port_is_chosen(
        option: str, fake_server: list[tuple[Any, ...]], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    variable, environment = f"deltamq.{option}_port", f"DELTAMQ_{option.upper()}_PORT"
    monkeypatch.delenv(environment, raising=False)
    run(["serve", "--amqp-port", "5673", f"--{option}-port", "5674"], capsys)
    run(["serve", "--amqp-port", "5673", "-D", f"{variable}=5675"], capsys)
    run(["serve", f"--{option}-port", "5676"], capsys)
    run(["serve", "--amqp-port", "5673"], capsys)
    monkeypatch.setenv(environment, "5677")
    run(["serve", "--amqp-port", "5673"], capsys)
    assert [call[1].get(variable) for call in fake_server] == \
        ["5674", "5675", "5676", "0", None]


def test_serve_defaults(fake_server: list[tuple[Any, ...]],
                        capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["serve"], capsys)[0] == 3
    assert fake_server == [(None, {}, "INFO", False)]


def test_serve_store_type_is_a_context_variable_and_overwrite_a_flag(
        fake_server: list[tuple[Any, ...]], capsys: pytest.CaptureFixture[str]) -> None:
    run(["serve", "--store-type", "memory", "-D", "deltamq.config_store_type=delta"], capsys)
    run(["serve", "--config", "new.json", "--overwrite-config"], capsys)
    assert fake_server == [(None, {"deltamq.config_store_type": "memory"}, "INFO", False),
                           ("new.json", {}, "INFO", True)]


def test_serve_help_explains_initial_and_stored_configuration(
        capsys: pytest.CaptureFixture[str]) -> None:
    text = " ".join(help_text(["serve"], capsys).split())
    for documented in ("--overwrite-config", "--store-type TYPE", "deltamq.config_store_type",
                       "initial configuration", "DIR/broker/config"):
        assert documented in text


@pytest.mark.parametrize("argv", [["serve", "-D", "novalue"], ["serve", "--amqp-port", "70000"],
                                  ["serve", "--amqp-port", "x"], ["serve", "--log-level", "loud"]])
def test_serve_rejects_bad_options(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    assert "error" in capsys.readouterr().err


def test_user_add_list_passwd_delete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "passwords"
    file_option = ["--file", str(path)]
    code, out, _ = run(["user", "add", "alice", "--password", "secret",
                        "--virtual-host", "main", *file_option], capsys)
    assert code == 0 and "alice" in out
    assert "secret" not in path.read_text()
    assert verify_password("secret", PasswordFile(path).load()["alice"].password)

    run(["user", "add", "bob", "--password", "pw", *file_option], capsys)
    code, out, _ = run(["user", "list", *file_option], capsys)
    assert code == 0
    assert out.splitlines() == ["alice\tmain", "bob\t(all virtual hosts)"]

    code, _, err = run(["user", "add", "bob", "--password", "again", *file_option], capsys)
    assert code == 1 and "already exists" in err

    assert run(["user", "passwd", "bob", "--password", "new", *file_option], capsys)[0] == 0
    assert verify_password("new", PasswordFile(path).load()["bob"].password)

    assert run(["user", "delete", "alice", *file_option], capsys)[0] == 0
    assert set(PasswordFile(path).load()) == {"bob"}
    code, _, err = run(["user", "delete", "alice", *file_option], capsys)
    assert code == 1 and "no user 'alice'" in err


def test_user_data_dir_and_environment(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    run(["user", "add", "carol", "--password", "pw", "--data-dir", str(tmp_path / "d")], capsys)
    assert "carol" in PasswordFile(tmp_path / "d" / "passwords").load()
    monkeypatch.setenv("DELTAMQ_DATA_DIR", str(tmp_path / "e"))
    run(["user", "add", "dave", "--password", "pw"], capsys)
    assert "dave" in PasswordFile(tmp_path / "e" / "passwords").load()


def test_user_list_without_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["user", "list", "--file", str(tmp_path / "none")], capsys)
    assert code == 1 and "no password file" in err


def test_password_from_standard_input(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("piped\n"))
    run(["user", "add", "erin", "--file", str(tmp_path / "p")], capsys)
    assert verify_password("piped", PasswordFile(tmp_path / "p").load()["erin"].password)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_password_prompt_must_match(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", Terminal())
    answers = iter(["one", "two", "same", "same"])
    monkeypatch.setattr(cli.getpass, "getpass", lambda prompt: next(answers))
    code, _, err = run(["user", "add", "frank", "--file", str(tmp_path / "p")], capsys)
    assert code == 1 and "do not match" in err
    assert not (tmp_path / "p").exists()
    assert run(["user", "add", "frank", "--file", str(tmp_path / "p")], capsys)[0] == 0
    assert verify_password("same", PasswordFile(tmp_path / "p").load()["frank"].password)


def test_file_and_data_dir_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["user", "list", "--file", "a", "--data-dir", "b"])
    assert "not allowed with" in capsys.readouterr().err


def test_user_add_admin_and_the_admin_action(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    file_option = ["--file", str(tmp_path / "passwords")]
    code, out, _ = run(["user", "add", "root", "--password", "pw", "--admin", *file_option],
                       capsys)
    assert code == 0 and "(administrator)" in out
    run(["user", "add", "bob", "--password", "pw", *file_option], capsys)
    assert run(["user", "list", *file_option], capsys)[1].splitlines() == [
        "bob\t(all virtual hosts)", "root\t(all virtual hosts)\tadministrator"]
    assert run(["user", "admin", "bob", *file_option], capsys)[0] == 0
    assert run(["user", "admin", "root", "--revoke", *file_option], capsys)[0] == 0
    users = PasswordFile(tmp_path / "passwords").load()
    assert (users["bob"].administrator, users["root"].administrator) == (True, False)
    code, _, err = run(["user", "admin", "nobody", *file_option], capsys)
    assert code == 1 and "no user 'nobody'" in err
