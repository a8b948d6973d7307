"""A recording journal that also keeps message rows by id and reads them back when the test says."""

from __future__ import annotations

from typing import Any, Callable

from broker.messaging.flow_to_disk import UnreadablePages
from broker.messaging.message import Message
from broker.messaging.queue import Queue

from .journal_fake import RecordingJournal


class StoredRows:
    """The journal's side of paging (a :class:`~broker.messaging.flow_to_disk.PageReader`).

    Rows are plain values, never the published Message, so a message read back
    is a new object, as from the Delta journal.  Reads wait in :attr:`pending`
    until :meth:`finish` (``at_once``: answered in the call, as without an event loop).
    """

    def __init__(self, journal: PagingJournal) -> None:
        self.journal = journal
        self.rows: dict[int, tuple[Any, ...]] = {}
        self.pending: list[tuple[list[int], Callable[[list[Message] | BaseException], None]]] = []
        self.at_once = False
        self.reads: list[list[int]] = []
        self.fail_with: BaseException | None = None

    def after_durable(self, callback: Callable[[bool], None]) -> None:
        group = self.journal.pending
        if group is None:
            callback(True)
        else:
            group.when_durable(lambda: callback(group.error is None))

    def read_back(self, ids: list[int], done: Callable[[list[Message] | BaseException], None]) -> None:
        assert ids == sorted(set(ids)), "ids are read ascending and distinct"
        self.reads.append(list(ids))
        if self.at_once:
            done(self._messages(ids))
        else:
            self.pending.append((ids, done))

    def _messages(self, ids: list[int]) -> list[Message] | BaseException:
        if self.fail_with is not None:
            return self.fail_with
        missing = [i for i in ids if i not in self.rows]
        if missing:
            return UnreadablePages(missing)
        found = []
        for message_id in ids:
            exchange, routing_key, body, properties, arrival = self.rows[message_id]
            message = Message(exchange=exchange, routing_key=routing_key, body=body, properties=properties,
                              arrival=arrival)
            message.journal_id = message_id
            found.append(message)
        return found

    def finish(self) -> int:
        """Answer the reads asked for until now (not those their answers ask for); how many."""
        pending, self.pending = self.pending, []
        for ids, done in pending:
            done(self._messages(ids))
        return len(pending)


class PagingJournal(RecordingJournal):
    """:class:`RecordingJournal` with a :class:`StoredRows` page reader."""

    def __init__(self) -> None:
        super().__init__()
        self.page_reader = StoredRows(self)

    def enqueued(self, queue: Queue, message: Message, keep: bool = False) -> bool:
        answer = super().enqueued(queue, message, keep)
        self.page_reader.rows[message.journal_id] = (message.exchange, message.routing_key, message.body,
                                                     message.properties, message.arrival)
        return answer
