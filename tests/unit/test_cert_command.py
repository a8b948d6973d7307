"""``deltamq cert``: a development CA, server and client certificates that verify each other."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from broker import cli
from broker.security.certificates import key_material, load_certificates, server_context
from broker.transport.tls import TlsLayer


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main(argv) == 0
    return capsys.readouterr().out


def test_cert_makes_a_ca_a_server_and_clients_that_handshake(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "certs"
    text = _run(["cert", "--out", str(out), "--client", "app", "--hostname", "localhost"], capsys)
    assert "wrote the CA" in text
    assert sorted(p.name for p in out.iterdir()) == [
        "ca-key.pem", "ca.pem", "client-app-key.pem", "client-app.pem", "server-key.pem",
        "server.pem"]
    for key in ("ca-key.pem", "server-key.pem", "client-app-key.pem"):
        assert (out / key).stat().st_mode & 0o777 == 0o600
    material = key_material(str(out / "server-key.pem"), str(out / "server.pem"), "", "", "test")
    context = server_context(material, load_certificates(str(out / "ca.pem"), "ca"),
                             need_client_auth=True, want_client_auth=False)
    client_context = ssl.create_default_context(cafile=str(out / "ca.pem"))
    client_context.load_cert_chain(str(out / "client-app.pem"), str(out / "client-app-key.pem"))
    server = TlsLayer(context)
    client = TlsLayer(client_context, server_side=False, server_hostname="localhost")
    for _ in range(5):
        server.receive_data(client.data_to_send())
        client.receive_data(server.data_to_send())
    assert server.session is not None and server.session.peer is not None
    assert server.session.peer.common_name == "app"


def test_cert_again_reuses_the_ca_and_keeps_existing_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "certs"
    _run(["cert", "--out", str(out)], capsys)
    ca, server = (out / "ca.pem").read_bytes(), (out / "server.pem").read_bytes()
    text = _run(["cert", "--out", str(out), "--client", "second"], capsys)
    assert "using the CA" in text and "kept" in text
    assert (out / "ca.pem").read_bytes() == ca and (out / "server.pem").read_bytes() == server
    issued = load_certificates(str(out / "client-second.pem"), "client")[0]
    assert issued.issuer == load_certificates(str(out / "ca.pem"), "ca")[0].subject
    _run(["cert", "--out", str(out), "--force"], capsys)
    assert (out / "server.pem").read_bytes() != server and (out / "ca.pem").read_bytes() == ca


def test_cert_refuses_a_client_name_that_is_a_path(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["cert", "--out", str(tmp_path), "--client", "../x"]) == 2
    assert "cannot name a file" in capsys.readouterr().err


def test_cert_refuses_half_a_ca(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run(["cert", "--out", str(tmp_path)], capsys)
    ca = (tmp_path / "ca.pem").read_bytes()
    (tmp_path / "ca-key.pem").unlink()
    assert cli.main(["cert", "--out", str(tmp_path), "--client", "x"]) == 2
    assert "ca.pem without its pair" in capsys.readouterr().err
    assert (tmp_path / "ca.pem").read_bytes() == ca and not (tmp_path / "client-x.pem").exists()
