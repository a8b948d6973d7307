"""Test doubles for the link registry: link endpoints as an AMQP 1.0 engine would hold them."""

from __future__ import annotations

from collections.abc import Hashable

from broker.errors import BrokerError
from broker.messaging.link_registry import Attachment, Link, LinkKey, LinkRegistry
from broker.messaging.link_terminus import ExpiryPolicy, Terminus, TerminusDurability
from broker.messaging.termini import LinkRole


class Endpoint:
    """A link endpoint on one session: records what the registry told it.

    With ``release_on_steal`` it lets go of a stolen link at once (the engine
    sending its detach within the call); otherwise the test releases it.
    """

    def __init__(self, registry: LinkRegistry, session: Hashable, connection: Hashable,
                 *, release_on_steal: bool = False) -> None:
        self.registry = registry
        self.session = session
        self.connection = connection
        self.connection_name = str(connection)
        self.release_on_steal = release_on_steal
        self.attachments: list[Attachment] = []
        self.stolen: list[Link] = []
        self.refused: list[BrokerError] = []

    def link_attached(self, attachment: Attachment) -> None:
        self.attachments.append(attachment)

    def link_stolen(self, link: Link) -> None:
        self.stolen.append(link)
        if self.release_on_steal:
            self.registry.detach(link, self, closed=False)

    def attach_refused(self, error: BrokerError) -> None:
        self.refused.append(error)

    @property
    def link(self) -> Link:
        return self.attachments[-1].link


def key(name: str = "orders-link", container: str = "client-1",
        role: LinkRole = LinkRole.SENDING) -> LinkKey:
    return LinkKey(container, name, role)


def terminus(policy: ExpiryPolicy = ExpiryPolicy.SESSION_END,
             durable: TerminusDurability = TerminusDurability.NONE, *, timeout: int | None = 10,
             address: str = "orders", **fields: object) -> Terminus:
    return Terminus(address=address, durable=durable, expiry_policy=policy, timeout=timeout,
                    **fields)  # type: ignore[arg-type]
