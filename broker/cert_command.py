"""``deltamq cert``: a development CA, a server certificate and client certificates, as PEM.

::

    deltamq cert [--out DIR] [--hostname NAME ...] [--client CN ...] [--days N]
                 [--key-type ec|rsa] [--force]

writes into ``DIR`` (default ``./certs``):

* ``ca.pem`` and ``ca-key.pem``: a private certificate authority -- made only if
  the directory has none, so running the command again issues more
  certificates from the same CA (clients already trusting it go on doing so);
* ``server.pem`` and ``server-key.pem``: the broker's certificate for
  ``--hostname`` (default ``localhost``, the loopback addresses and this host's
  name), for a ``NonJavaKeyStore``;
* ``client-<CN>.pem`` and ``client-<CN>-key.pem`` for each ``--client CN``:
  certificates clients present for ``needClientAuth`` ports and SASL EXTERNAL
  (the CN is the user name).

Existing server or client files are kept unless ``--force``.  Keys are written
with mode 0600.  For development and tests: a production broker gets its
certificate from a real CA.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from broker.security import cert_generation as generation


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cert = commands.add_parser(
        "cert", help="make a development CA, server and client certificates (PEM)",
        description="Write a development CA (kept and reused), a server certificate signed by"
                    " it and, with --client, client certificates, as PEM files for a"
                    " NonJavaKeyStore / NonJavaTrustStore and for TLS clients.")
    cert.add_argument("--out", metavar="DIR", default="certs",
                      help="directory for the files (default ./certs)")
    cert.add_argument("--hostname", dest="hostnames", metavar="NAME", action="append",
                      default=[], help="a host name or address the server certificate is for"
                                       " (repeatable; default: localhost, 127.0.0.1, ::1 and"
                                       " this host's name)")
    cert.add_argument("--client", dest="clients", metavar="CN", action="append", default=[],
                      help="also make a client certificate with this common name (the user"
                           " name SASL EXTERNAL logs in as; repeatable)")
    cert.add_argument("--days", metavar="N", type=int, default=generation.DEFAULT_DAYS,
                      help=f"validity in days (default {generation.DEFAULT_DAYS})")
    cert.add_argument("--key-type", choices=("ec", "rsa"), default="ec",
                      help="EC P-256 (default) or RSA 2048 keys")
    cert.add_argument("--force", action="store_true",
                      help="replace existing server and client files")
    cert.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if args.days < 1:
        print("deltamq cert: --days must be 1 or more", file=sys.stderr)
        return 2
    for client in args.clients:
        if not client or "/" in client or client in (".", ".."):
            print(f"deltamq cert: --client {client!r} cannot name a file", file=sys.stderr)
            return 2
    ca_cert, ca_key = out / "ca.pem", out / "ca-key.pem"
    if ca_cert.exists() != ca_key.exists():
        print(f"deltamq cert: {out} holds {ca_cert.name if ca_cert.exists() else ca_key.name}"
              " without its pair: restore it, or remove it to make a new CA", file=sys.stderr)
        return 2
    if ca_cert.exists():
        ca = generation.load_issued(ca_key, ca_cert)
        print(f"using the CA in {ca_cert}")
    else:
        ca = generation.certificate_authority(days=max(args.days, generation.DEFAULT_DAYS),
                                              key_type=args.key_type)
        generation.write_issued(ca, ca_key, ca_cert)
        print(f"wrote the CA: {ca_cert} (trust it in clients) and {ca_key} (keep it private)")
    hostnames = args.hostnames or generation.default_hostnames()
    wanted = [("server", hostnames[0], True, hostnames)]
    wanted += [(f"client-{cn}", cn, False, []) for cn in args.clients]
    for stem, common_name, server, names in wanted:
        certificate, key = out / f"{stem}.pem", out / f"{stem}-key.pem"
        if (certificate.exists() or key.exists()) and not args.force:
            print(f"kept {certificate} (exists; --force replaces it)")
            continue
        issued = generation.issue(ca, common_name, server=server, hostnames=names,
                                  days=args.days, key_type=args.key_type)
        generation.write_issued(issued, key, certificate)
        what = f"for {', '.join(names)}" if server else f"CN={common_name}"
        print(f"wrote {certificate} and {key} ({what})")
    return 0
