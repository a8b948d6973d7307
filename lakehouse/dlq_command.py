"""``deltamq spark dlq``: run the dead-letter processor (:mod:`lakehouse.dlq`).

The policy is read and checked before Spark starts, so a bad file costs no
JVM: its error goes to standard error and the command exits with 2.  Once
the job runs, standard error gets one summary line per run (``--once``) or
on stop; the JVM's own output goes to ``~/.cache/deltamq/spark.log``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

_PROG = "deltamq spark dlq"


def add_command(jobs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dlq = jobs.add_parser(
        "dlq", help="classify dead letters into a curated Delta table and republish repaired ones",
        description="A micro-batch job over a node's journal: every dead letter that reaches"
                    " one of the policy's dead-letter queues is classified (reason, source queue,"
                    " x-death count, headers) into a curated Delta table, and republished, parked or"
                    " dropped as the policy says, with a retry cap and backoff. Idempotent across"
                    " restarts. See docs/dead-letter-processor.md.")
    dlq.add_argument("--policy", required=True, metavar="FILE", help="the policy (TOML)")
    dlq.add_argument("--data-dir", default=os.environ.get("DELTAMQ_DATA_DIR", "./data"),
                     help="the broker's data directory (default: $DELTAMQ_DATA_DIR or ./data)")
    dlq.add_argument("--node", default="default", help="the virtual host node whose journal to read"
                                                       " (default: default)")
    dlq.add_argument("--checkpoint", metavar="DIR",
                     help="where the job saves how far in the journal it got (default: the curated table's path"
                          " + '.checkpoint')")
    dlq.add_argument("--once", action="store_true",
                     help="process what the journal holds, republish what is due, and stop;"
                          " default: run until interrupted")
    dlq.add_argument("--interval", type=float, default=5.0, metavar="SECONDS",
                     help="continuous mode: seconds between micro-batches and due passes (default 5)")
    dlq.add_argument("--amqp-url", default=os.environ.get("DELTAMQ_AMQP_URL", "amqp://localhost:5672/"),
                     help="the broker to republish to: host, port, credentials, TLS (amqps://); each"
                          " dead letter goes back to its own virtual host (default: $DELTAMQ_AMQP_URL"
                          " or amqp://localhost:5672/)")
    dlq.add_argument("--url", default=os.environ.get("DELTAMQ_URL", "http://localhost:8080"),
                     help="the broker's HTTP management, where curated dead letters are taken out of their"
                          " queue (policy 'settle'; default: $DELTAMQ_URL or http://localhost:8080)")
    dlq.add_argument("--username", default=os.environ.get("DELTAMQ_USERNAME"),
                     help="AMQP user (default: $DELTAMQ_USERNAME, else the URL's, else guest)")
    dlq.add_argument("--password", default=os.environ.get("DELTAMQ_PASSWORD"),
                     help="AMQP password (default: $DELTAMQ_PASSWORD, else the URL's, else guest)")
    dlq.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from lakehouse.dlq_policy import PolicyError, load_policy

    try:
        policy = load_policy(args.policy)
    except PolicyError as exc:
        return _fail(str(exc), 2)
    if args.interval <= 0:
        return _fail(f"--interval must be a positive number of seconds (got {args.interval:g})", 2)
    journal = Path(args.data_dir) / args.node / "journal"
    if not (journal / "_delta_log").is_dir():
        return _fail(f"no journal at {journal}: give the broker's --data-dir and the --node whose"
                     " virtual host has the dead-letter queues", 2)
    checkpoint = args.checkpoint or f"{policy.curated_table}.checkpoint"
    from lakehouse.delta_jars import FetchFailed, cache_dir
    from lakehouse.prerequisites import MissingPrerequisite, require_java

    jvm_log = cache_dir() / "spark.log"
    try:
        require_java()
        spark = _start_session(jvm_log)
    except (MissingPrerequisite, FetchFailed) as exc:
        return _fail(str(exc), 1)
    except Exception as exc:                     # the JVM did not start, or died starting
        return _fail(f"Spark did not start: {exc} (Spark's output: {jvm_log})", 1)
    try:
        return _process(spark, policy, args, checkpoint)
    finally:
        spark.stop()


def _process(spark: Any, policy: Any, args: argparse.Namespace, checkpoint: str) -> int:
    import pika.exceptions

    from lakehouse.dlq import DeadLetterJob
    from lakehouse.dlq_republish import Republisher

    def republisher(vhost: str) -> Republisher:
        publisher = Republisher(args.amqp_url, username=args.username, password=args.password)
        publisher.parameters.virtual_host = vhost
        return publisher

    job = DeadLetterJob(spark, policy, data_dir=args.data_dir, node=args.node, checkpoint=checkpoint,
                        republisher=republisher, settler=settler(args))
    stop = threading.Event()
    try:
        if args.once:
            job.run_once()
        else:
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            try:
                job.run(args.interval, stop)
            except KeyboardInterrupt:
                stop.set()
    except pika.exceptions.AMQPConnectionError as exc:
        return _fail(f"cannot republish: no AMQP connection to {args.amqp_url} ({exc!r})", 1)
    except Exception as exc:                     # the streaming query's failure, with Spark's message
        return _fail(f"the job failed: {exc}", 1)
    print(f"{_PROG}: {job.summary.line(job.waiting())}", file=sys.stderr)
    return 0


#: the lease consumer the job settles dead letters as (shown among the queue's consumers)
SETTLING_CONSUMER = "deltamq-dlq"


def settler(args: argparse.Namespace) -> Any:
    """Takes dead letters out of a queue through the broker's Queue operation ``settleMessages``."""
    import uuid
    from urllib.parse import unquote, urlparse

    from broker.messaging.leases import id_ranges
    from lakehouse.lease_client import LeaseClient

    amqp = urlparse(args.amqp_url)
    user = args.username or (unquote(amqp.username) if amqp.username else "guest")
    password = args.password or (unquote(amqp.password) if amqp.password else "guest")
    session = uuid.uuid4().hex

    def settle(vhost: str, queue: str, ids: list[int]) -> None:
        client = LeaseClient(args.url, args.node, vhost, queue, SETTLING_CONSUMER, session, user, password, 60)
        client.settle(id_ranges(ids))
    return settle


def _start_session(jvm_log: Path) -> Any:
    from lakehouse.spark import spark_session

    return spark_session(None, app_name="deltamq-dlq", jvm_log=jvm_log,
                         progress=lambda line: print(f"{_PROG}: {line}", file=sys.stderr, flush=True))


def _fail(message: str, code: int) -> int:
    print(f"{_PROG}: {message}", file=sys.stderr)
    return code
