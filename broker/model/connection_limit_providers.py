"""Broker-J's connection limit providers, as configured objects.

``BrokerConnectionLimitProvider`` (a child of the Broker) of type

* ``ConnectionLimitFile``: the CLT rules of a file (``path``), read on open
  and by the ``reload`` operation;
* ``RulesBased``: rules kept in the broker's configuration store (the
  ``rules`` attribute: lines of CLT syntax, or ``{"identity", "port",
  "blocked", "countLimit", "frequencyLimit", "frequencyPeriod"}`` objects,
  the period in milliseconds), ``defaultFrequencyPeriod`` (ms), and the
  operations ``loadFromFile``, ``clearRules``, ``extractRules``.

Both have ``resetCounters`` (forget the recent connections the frequency
limits count).  The rules of every active provider are merged and handed
to the broker's :class:`~broker.transport.connection_limits.ConnectionLimits`,
which asks them when a connection opens a virtual host
(:mod:`broker.security.connection_limit_rules` says how they decide); each
provider's rules limit on their own, as Broker-J chains its providers.  A
rule without a period of its own takes its provider's default; a negative
default turns off every frequency limit of the provider (Broker-J's rule).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from broker.errors import ConfigurationError
from broker.model import registry
from broker.model.access_control import InForce, read_text
from broker.model.attributes import attribute, derived
from broker.model.confinement import check_path
from broker.model.configured_object import ConfiguredObject, State
from broker.model.operations import operation
from broker.security import connection_limit_rules as clt
from broker.security.connection_limit_rules import ConnectionLimitRule, ParsedLimits


class BrokerConnectionLimitProvider(InForce):
    """Base of the connection limit provider types."""

    category = "BrokerConnectionLimitProvider"

    type = attribute(str, mandatory=True, mutable=False,
                     description="Provider type: ConnectionLimitFile or RulesBased")

    def __init__(self, parent: ConfiguredObject | None, attributes: Mapping[str, Any],
                 *, id: str | None = None) -> None:
        super().__init__(parent, attributes, id=id)
        self.limits: ParsedLimits | None = None

    def read(self) -> ParsedLimits:
        return self.load_limits()

    def load_limits(self) -> ParsedLimits:
        raise ConfigurationError(f"{self.label} has no rules")

    def put_in_force(self, content: ParsedLimits) -> None:
        self.limits = content

    def hand_over(self, obj: ConfiguredObject) -> None:
        apply(obj)

    @derived(int, description="The number of connection limit rules in force")
    def rule_count(self) -> int:
        return len(self.limits.rules) if self.limits is not None else 0

    @operation(description="The rules in force as the text of a connection limit file",
               changes=False, returns=str)
    def extract_rules(self) -> str:
        limits = self.limits
        if limits is None:
            return ""
        lines = [f"CONFIG default_frequency_period={limits.default_period_ms}"
                 + (" log_all=true" if limits.log_all else "")]
        return "\n".join(lines + [rule.text() for rule in limits.rules]) + "\n"

    @operation(description="Forget the recent connections the frequency limits count",
               changes=False)
    def reset_counters(self) -> None:
        limits = getattr(self.ancestor("Broker"), "connection_limits", None)
        if limits is not None:
            limits.rules.reset_counters()


class ConnectionLimitFileProvider(BrokerConnectionLimitProvider):
    type_name = "ConnectionLimitFile"

    path = attribute(str, mandatory=True, path=True,
                     description="The connection limit (CLT) file; read on open and by reload")

    def writes_to_paths(self) -> bool:
        return False

    def load_limits(self) -> ParsedLimits:
        return clt.parse(read_text(self.path, self.label), self.path)

    @operation(description="Read the connection limit file again")
    def reload(self) -> None:
        self.reread()


class RulesBasedConnectionLimitProvider(BrokerConnectionLimitProvider):
    type_name = "RulesBased"

    rules = attribute(list, default=[], expand=False,
                      description="The connection limit rules: CLT lines, or {identity, port,"
                                  " blocked, countLimit, frequencyLimit, frequencyPeriod (ms)}")
    default_frequency_period = attribute(int, default=clt.DEFAULT_PERIOD_MS,
                                         description="The period of a frequency limit that"
                                                     " names none, in ms (0: such limits are"
                                                     " off; negative: every frequency limit"
                                                     " of the provider is off)")

    def load_limits(self) -> ParsedLimits:
        rules = [rule_from_json(item, f"{self.label}: rule {i + 1}")
                 for i, item in enumerate(self.rules or [])]
        return ParsedLimits([r for r in rules if not r.empty], int(self.default_frequency_period))

    @operation(description="Replace the rules with those of a connection limit file",
               path=attribute(str, mandatory=True, description="The file to load"))
    def load_from_file(self, path: str) -> None:
        roots = self.root.path_roots()
        if roots is not None:
            check_path(path, roots, self.label, "path")
        parsed = clt.parse(read_text(path, self.label), path)
        self.set_attributes({"rules": [rule_to_json(r) for r in parsed.rules],
                             "defaultFrequencyPeriod": parsed.default_period_ms})

    @operation(description="Remove every rule")
    def clear_rules(self) -> None:
        self.set_attributes({"rules": []})


def rule_to_json(rule: ConnectionLimitRule) -> dict[str, Any]:
    period = rule.frequency_period
    return {"identity": rule.identity, "port": rule.port, "blocked": rule.blocked,
            "countLimit": rule.count, "frequencyLimit": rule.frequency,
            "frequencyPeriod": None if period is None else round(period * 1000)}


def rule_from_json(item: Any, where: str) -> ConnectionLimitRule:
    if isinstance(item, str):
        try:
            return clt.parse_rule(item)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{where}: {exc.text}") from None
    if not isinstance(item, Mapping) or not str(item.get("identity") or "").strip():
        raise ConfigurationError(f"{where}: expected a CLT line or an object with an identity")
    try:
        period = item.get("frequencyPeriod")
        count, frequency = item.get("countLimit"), item.get("frequencyLimit")
        return ConnectionLimitRule(
            str(item["identity"]), str(item.get("port") or clt.ALL),
            None if count is None or int(count) < 0 else int(count),
            None if frequency is None or int(frequency) < 0 else int(frequency),
            None if period is None else int(period) / 1000, bool(item.get("blocked", False)))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{where}: {exc}") from None


def apply(obj: ConfiguredObject) -> None:
    """Hand the merged rules of the broker's active providers to its connection limits."""
    broker = obj.ancestor("Broker")
    limits = getattr(broker, "connection_limits", None)
    if broker is None or limits is None:
        return
    rules: list[ConnectionLimitRule] = []
    log_all = False
    for provider in broker.children("BrokerConnectionLimitProvider"):
        parsed = getattr(provider, "limits", None)
        if parsed is None or not (provider.state is State.ACTIVE or provider is obj):
            continue
        log_all = log_all or parsed.log_all
        default = parsed.default_period_ms / 1000
        for rule in parsed.rules:
            rule = dataclasses.replace(rule, source=provider.name)
            if rule.frequency is not None and (rule.frequency_period is None or default < 0):
                # the provider's default period; 0 turns such a frequency limit off, and a
                # negative default every one of the provider's (Broker-J's rule)
                kept = default > 0
                rule = dataclasses.replace(rule, frequency_period=default if kept else None,
                                           frequency=rule.frequency if kept else None)
            if not rule.empty:
                rules.append(rule)
    limits.rules.rules = rules
    limits.rules.log_all = log_all


for _cls in (ConnectionLimitFileProvider, RulesBasedConnectionLimitProvider):
    registry.register_type(_cls)
