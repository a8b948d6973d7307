"""The in-memory messaging core: messages, queues, exchanges, bindings, transactions.

Pure and single-threaded: no I/O, no threads, no locks, no protocol imports.
One event loop owns all of it; time comes from an injected clock.  See
docs/INTERFACES.md for the seams protocol engines use.
"""

from __future__ import annotations

from broker.messaging.arguments import QueueSettings, queue_settings
from broker.messaging.exchange import (
    EXCHANGE_TYPES, Binding, DirectExchange, Exchange, FanoutExchange, HeadersExchange, TopicExchange)
from broker.messaging.last_value_queue import LastValueQueue
from broker.messaging.message import Message, MessageProperties
from broker.messaging.message_format import MessageFormat, format_for
from broker.messaging.namespace import Namespace, NamespaceListener, create_queue
from broker.messaging.priority_queue import PriorityQueue
from broker.messaging.queue import Consumer, Queue, QueueEntry, QueueHost
from broker.messaging.sorted_queue import SortedQueue
from broker.messaging.transaction import AutoCommitTransaction, LocalTransaction, ServerTransaction

__all__ = [
    "AutoCommitTransaction", "Binding", "Consumer", "DirectExchange", "EXCHANGE_TYPES", "Exchange",
    "FanoutExchange", "HeadersExchange", "LastValueQueue", "LocalTransaction", "Message",
    "MessageFormat", "MessageProperties", "Namespace", "NamespaceListener", "PriorityQueue",
    "Queue", "QueueEntry", "QueueHost", "QueueSettings", "ServerTransaction", "SortedQueue",
    "TopicExchange", "create_queue", "format_for", "queue_settings",
]
