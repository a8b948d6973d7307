"""``deltamq``: start the broker, manage the users of its password file.

::

    deltamq serve [--config FILE] [--overwrite-config] [--store-type TYPE] [--data-dir DIR]
                  [--amqp-port N] [--amqps-port N] [--ws-port N] [--http-port N] [-D name=value ...]
                  [--log-level LEVEL]
    deltamq user add NAME [--password P] [--virtual-host VHOST ...] [--admin] [--data-dir DIR | --file PATH]
    deltamq user admin NAME [--revoke] [--data-dir DIR | --file PATH]
    deltamq user passwd NAME [--password P] [--data-dir DIR | --file PATH]
    deltamq user delete NAME [--data-dir DIR | --file PATH]
    deltamq user list [--data-dir DIR | --file PATH]
    deltamq cert [--out DIR] [--hostname NAME ...] [--client CN ...] [--days N] [--force]
    deltamq --version

Other packages add commands through entry point group ``deltamq.commands``:
``sql`` (:mod:`lakehouse.sql_command`), ``status``, ``list`` and ``purge``
(:mod:`mgmt.ctl`, talking to a running broker over its REST API).

``serve``'s options are context variables (``--amqp-port 5673`` is
``-D deltamq.amqp_port=5673``); an explicit option wins over a ``-D`` of the
same variable.  ``--overwrite-config`` is not: it acts once, on this start.
A broker told its AMQP port (``--amqp-port``) but not its AMQPS or WebSocket
port listens for TLS and WebSocket on free port numbers rather than on 5671 and
5673, so brokers started side by side (tests, benchmarks) do not compete for
them; ``--amqps-port`` / ``--ws-port`` (or ``deltamq.amqps_port`` /
``deltamq.ws_port``) name them.  ``deltamq cert`` is
:mod:`broker.cert_command`.
The server itself is :func:`broker.server.serve`.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Sequence
from pathlib import Path

from broker import __version__, cert_command
from broker.errors import BrokerError
from broker.model.context import environment_value
from broker.model.system_store import STORE_TYPE_VARIABLE
from broker.protocol.engine import ENGINES
from broker.security.passwords import PasswordFile

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DATA_DIR_VARIABLE = "deltamq.data_dir"
AMQPS_PORT_VARIABLE = "deltamq.amqps_port"
WS_PORT_VARIABLE = "deltamq.ws_port"
DEFAULT_DATA_DIR = "./data"
PASSWORD_FILE_NAME = "passwords"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help(sys.stderr)
        return 2
    try:
        code: int = args.run(args)
    except BrokerError as exc:
        print(f"deltamq: error: {exc.text or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deltamq",
        description="DeltaMQ: an AMQP broker whose durable state lives in Delta Lake.")
    parser.add_argument("--version", action="version", version=f"deltamq {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    _add_serve(commands)
    _add_user(commands)
    cert_command.add_command(commands)
    _add_plugin_commands(commands)
    return parser


def _add_plugin_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Commands other packages contribute through the ``deltamq.commands`` entry points."""
    from broker.model import registry

    for name in registry.plugin_names(registry.COMMAND_GROUP):
        add_command = registry.load_plugin(registry.COMMAND_GROUP, name, what="command")
        add_command(commands)


# -- serve ------------------------------------------------------------------------------

def _add_serve(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser(
        "serve", help="run the broker",
        description=f"Run the broker. With no options it listens for {ENGINES.describe()} on"
                    " 5672 and HTTP on 8080 on every interface, keeping its data under ./data.",
        epilog="Every option is a context variable for ${...} references in the configuration;"
               " context is looked up on the object and its ancestors, then -D/options, then"
               " the environment (deltamq.amqp_port or DELTAMQ_AMQP_PORT), then the"
               " configuration file's 'context' defaults.")
    serve.add_argument("--config", metavar="FILE",
                       help="initial configuration (JSON): seeds the broker's configuration"
                            " store when it is empty (first start); later starts use the"
                            " store and take only the file's 'context' defaults; default:"
                            " the embedded conf/config.json")
    serve.add_argument("--overwrite-config", action="store_true",
                       help="replace the stored broker configuration (ports, authentication"
                            " providers, virtual host nodes) by the file's; the nodes' own"
                            " data is kept")
    serve.add_argument("--store-type", metavar="TYPE",
                       help="where the broker configuration is kept (sets"
                            f" {STORE_TYPE_VARIABLE}): delta (default; the Delta table"
                            " DIR/broker/config) or memory (read from the file at every"
                            " start; nothing changed over management survives a restart)")
    serve.add_argument("--data-dir", metavar="DIR",
                       help="directory for the broker's data (sets deltamq.data_dir;"
                            " default ./data)")
    serve.add_argument("--amqp-port", metavar="N", type=_port_number,
                       help="AMQP port (sets deltamq.amqp_port; default 5672; 0 picks a free one)")
    serve.add_argument("--amqps-port", metavar="N", type=_port_number,
                       help="AMQP over TLS port (sets deltamq.amqps_port; default 5671, or a"
                            " free one when --amqp-port is given without this)")
    serve.add_argument("--ws-port", metavar="N", type=_port_number,
                       help="AMQP over WebSocket port (sets deltamq.ws_port; default 5673, or a"
                            " free one when --amqp-port is given without this)")
    serve.add_argument("--http-port", metavar="N", type=_port_number,
                       help="HTTP management port (sets deltamq.http_port; default 8080)")
    serve.add_argument("-D", dest="defines", metavar="name=value", action="append", default=[],
                       type=_definition,
                       help="set a context variable, overriding the configuration's default"
                            " and the environment (repeatable)")
    serve.add_argument("--log-level", metavar="LEVEL", default="INFO", type=str.upper,
                       choices=LOG_LEVELS, help=f"logging threshold: {', '.join(LOG_LEVELS)}"
                                                " (default INFO)")
    serve.set_defaults(run=_serve)


def serve_context(args: argparse.Namespace) -> dict[str, str]:
    """The context overrides ``serve``'s options stand for."""
    context = dict(args.defines)
    if args.data_dir is not None:
        context[DATA_DIR_VARIABLE] = args.data_dir
    if args.amqp_port is not None:
        context["deltamq.amqp_port"] = str(args.amqp_port)
    for variable, value in ((AMQPS_PORT_VARIABLE, args.amqps_port), (WS_PORT_VARIABLE, args.ws_port)):
        if value is not None:
            context[variable] = str(value)
        elif args.amqp_port is not None and variable not in context \
                and environment_value(variable) is None:
            context[variable] = "0"     # brokers side by side: not all on 5671 and 5673
    if args.http_port is not None:
        context["deltamq.http_port"] = str(args.http_port)
    if args.store_type is not None:
        context[STORE_TYPE_VARIABLE] = args.store_type
    return context


def _serve(args: argparse.Namespace) -> int:
    from broker.server import serve  # imported here: `deltamq user` must not need the server

    code: int = serve(args.config, serve_context(args), args.log_level,
                      overwrite_config=args.overwrite_config)
    return code


def _port_number(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"port must be between 0 and 65535: {number}")
    return number


def _definition(text: str) -> tuple[str, str]:
    name, separator, value = text.partition("=")
    if not separator or not name.strip():
        raise argparse.ArgumentTypeError(f"expected name=value, got {text!r}")
    return name.strip(), value


# -- user -------------------------------------------------------------------------------

def _add_user(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    user = commands.add_parser(
        "user", help="manage the users of the password file",
        description="Add, change, delete and list users of the PasswordFile authentication"
                    " provider. A running broker picks the change up at the next login.")
    actions = user.add_subparsers(title="actions", metavar="ACTION", required=True)

    add = actions.add_parser("add", help="add a user")
    add.add_argument("name", metavar="NAME", help="the user name")
    _add_password_option(add)
    add.add_argument("--virtual-host", dest="virtual_hosts", metavar="VHOST", action="append",
                     default=[], help="a virtual host the user may open (repeatable;"
                                      " none given: all)")
    add.add_argument("--admin", action="store_true",
                     help="an administrator: may manage the broker itself over management"
                          " (ports, authentication providers, virtual host nodes, users)")
    _add_file_options(add)
    add.set_defaults(run=_user_add)

    admin = actions.add_parser("admin", help="make a user an administrator (or, with --revoke,"
                                             " no longer one)")
    admin.add_argument("name", metavar="NAME", help="the user name")
    admin.add_argument("--revoke", action="store_true", help="take the role away")
    _add_file_options(admin)
    admin.set_defaults(run=_user_admin)

    passwd = actions.add_parser("passwd", help="change a user's password")
    passwd.add_argument("name", metavar="NAME", help="the user name")
    _add_password_option(passwd)
    _add_file_options(passwd)
    passwd.set_defaults(run=_user_passwd)

    delete = actions.add_parser("delete", help="delete a user")
    delete.add_argument("name", metavar="NAME", help="the user name")
    _add_file_options(delete)
    delete.set_defaults(run=_user_delete)

    listing = actions.add_parser("list", help="list users, the virtual hosts they may open and"
                                              " the administrators")
    _add_file_options(listing)
    listing.set_defaults(run=_user_list)


def _add_password_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--password", metavar="P",
                        help="the password (visible to other local users in the process list;"
                             " omit it to be prompted, or pipe it on standard input)")


def _add_file_options(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--data-dir", metavar="DIR",
                       help="the broker's data directory; the file is DIR/passwords"
                            " (default: $DELTAMQ_DATA_DIR or ./data)")
    where.add_argument("--file", metavar="PATH", help="the password file itself")


def password_file_path(args: argparse.Namespace) -> Path:
    """--file, else --data-dir/passwords, else the data dir from the environment or ./data."""
    if args.file:
        return Path(args.file)
    data_dir = args.data_dir or environment_value(DATA_DIR_VARIABLE) or DEFAULT_DATA_DIR
    return Path(data_dir) / PASSWORD_FILE_NAME


def _password_file(args: argparse.Namespace) -> PasswordFile:
    return PasswordFile(password_file_path(args))


def _read_password(args: argparse.Namespace) -> str:
    if args.password is not None:
        return str(args.password)
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\r\n")
    first = getpass.getpass(f"Password for {args.name}: ")
    if getpass.getpass("Repeat password: ") != first:
        raise _UsageError("passwords do not match")
    return first


class _UsageError(BrokerError):
    pass


def _user_add(args: argparse.Namespace) -> int:
    password_file = _password_file(args)
    password_file.add_user(args.name, _read_password(args), args.virtual_hosts,
                           administrator=args.admin)
    role = " (administrator)" if args.admin else ""
    print(f"user '{args.name}'{role} added to {password_file.path}")
    return 0


def _user_admin(args: argparse.Namespace) -> int:
    password_file = _password_file(args)
    password_file.set_administrator(args.name, not args.revoke)
    print(f"user '{args.name}' is {'no longer' if args.revoke else 'now'} an administrator"
          f" in {password_file.path}")
    return 0


def _user_passwd(args: argparse.Namespace) -> int:
    password_file = _password_file(args)
    password_file.change_password(args.name, _read_password(args))
    print(f"password of '{args.name}' changed in {password_file.path}")
    return 0


def _user_delete(args: argparse.Namespace) -> int:
    password_file = _password_file(args)
    password_file.remove_user(args.name)
    print(f"user '{args.name}' deleted from {password_file.path}")
    return 0


def _user_list(args: argparse.Namespace) -> int:
    password_file = _password_file(args)
    if not password_file.exists():
        print(f"no password file at {password_file.path}", file=sys.stderr)
        return 1
    for name, entry in sorted(password_file.load().items()):
        hosts = ", ".join(entry.virtual_hosts) if entry.virtual_hosts else "(all virtual hosts)"
        role = "\tadministrator" if entry.administrator else ""
        print(f"{name}\t{hosts}{role}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
