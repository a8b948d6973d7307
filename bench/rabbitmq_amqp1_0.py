"""The private RabbitMQ node of bench/rabbitmq.py with its AMQP 1.0 plugin.

Debian's rabbitmq-server 3.10 ships ``rabbitmq_amqp1_0``; enabled in the node's
own enabled-plugins file, it serves AMQP 1.0 on the node's AMQP port (127.0.0.1,
next to 0-9-1, told apart by the protocol header).  Everything else is the node
bench/rabbitmq.py starts: current user, temporary directory, own epmd.

3.10's addresses: ``/amq/queue/<q>`` names an existing queue, as source (consume
from it) and as target (publish through the default exchange with routing key
<q>); the benchmark declares its queues over 0-9-1 first, so that durable means
the same on every broker.  A SASL PLAIN login as guest works from loopback.
"""

from __future__ import annotations

import os

from .rabbitmq import RabbitMQ


class RabbitMQAmqp10(RabbitMQ):
    name = "rabbitmq"

    def _write_config(self) -> None:
        super()._write_config()
        assert self.dir
        plugins = ["rabbitmq_amqp1_0"] + (["rabbitmq_management"] if self.management else [])
        with open(os.path.join(self.dir, "enabled_plugins"), "w") as f:
            f.write(f"[{','.join(plugins)}].\n")

    def address(self, queue: str) -> str:
        """The 1.0 address of an existing queue (source and target)."""
        return f"/amq/queue/{queue}"

    def describe(self) -> str:
        return (f"RabbitMQ {self.version} (private node {self.nodename}, rabbitmq_amqp1_0 plugin, "
                "classic queues)")
