"""Rates per second of counter statistics, from readings taken in the background (sans-IO).

The broker keeps plain counters (messages in, bytes out, ...); a rate is
the change of a counter over time, so answering "how fast?" needs a reading
of the counter from a little while ago.  Two places keep such readings:

* :class:`RateSampler` reads the counters of every object that has some, in
  rounds, into a :class:`CounterHistory` -- the management plugin runs one
  round a second on the broker's event loop, into the process's
  :data:`SAMPLED` history.  The very first read of an object thus already
  has a reading from a second or two ago, whoever polls and however often.
* :class:`RateBook`, which answers reads, also keeps readings of its own,
  taken at reads, of the objects the samplers have not known for a whole
  ``interval`` (none runs, or the object is new): with no reading before it,
  the first read of such an object reports 0.

The answer is the rate since the newest reading at least ``interval`` old
(else the oldest there is): with a round a second, over the last one to two
seconds.

A round has to be cheap with 10,000 idle queues.  Objects are read a group
at a time -- the children of one category under one parent, counter by
counter (``map`` over the group) -- and when a group's members and every
counter column are what they were in the previous round, nothing is
written at all.  Only an object whose counters moved gets a new reading.
An object's readings are *runs*: values that held from one round to a later
one; the newest run holds through the latest round of its group, so an idle
object costs no write however long it stays idle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from itertools import compress
from operator import ne, or_
from typing import Any

from broker.model import registry
from broker.model.attributes import DerivedAttribute, derived_attributes
from broker.model.configured_object import ConfiguredObject

RATE_SUFFIX = "Rate"

#: a reading younger than this share of ``interval`` gives no rate (too noisy)
MIN_SPAN_SHARE = 0.1

#: (since, until, values): the counters read ``values`` from round ``since``
#: through round ``until`` (None: through the latest round of the group)
_Run = tuple[float, "float | None", tuple[int, ...]]


def rate_name(counter: str) -> str:
    return counter + RATE_SUFFIX


def _rates(now: float, then: float, names: tuple[str, ...], values: tuple[int, ...],
           before_names: tuple[str, ...], before: tuple[int, ...]) -> list[float] | None:
    """Rates per second from ``before`` (read at ``then``) to ``values`` (now); None if all 0."""
    if before_names != names:
        earlier = dict(zip(before_names, before))
        before = tuple(earlier.get(name, 0) for name in names)
    if before == values:
        return None
    elapsed = now - then
    return [round((value - old) / elapsed, 3) if value > old else 0.0
            for value, old in zip(values, before)]


# -- sampled in the background ---------------------------------------------------------

class _Part:
    """Members of a group that share one class, and their counter columns of the last round."""

    __slots__ = ("members", "computes", "columns", "tracks", "confirmed")

    def __init__(self, members: list[ConfiguredObject], computes: tuple[Callable[[Any], Any], ...],
                 columns: list[list[Any]], tracks: list[_Track], confirmed: float) -> None:
        self.members = members
        self.computes = computes
        self.columns = columns
        self.tracks = tracks
        #: time of the latest round that read these members
        self.confirmed = confirmed


class _Group:
    """The children of one category under one parent, as the latest round found them."""

    __slots__ = ("members", "parts", "round")

    def __init__(self, members: list[ConfiguredObject], parts: list[_Part], round: int) -> None:
        self.members = members
        self.parts = parts
        self.round = round


class _Track:
    """The runs of readings of one object's counters, oldest first."""

    __slots__ = ("names", "runs", "part", "sampler")

    def __init__(self, names: tuple[str, ...], run: _Run, part: _Part,
                 sampler: RateSampler) -> None:
        self.names = names
        self.runs: list[_Run] = [run]
        self.part = part
        self.sampler = sampler

    def moved(self, since: float, previous: float, values: tuple[int, ...],
              interval: float) -> None:
        """The counters read ``values`` at ``since``; they read the newest run's at ``previous``."""
        runs = self.runs
        first, _, held = runs[-1]
        runs[-1] = (first, previous, held)
        runs.append((since, None, values))
        # a reader asks for a reading at least `interval` before its (later) time:
        # once the second run is that old, the first can never be the answer
        while len(runs) > 1 and runs[1][0] <= since - interval:
            del runs[0]


class CounterHistory:
    """Timed readings of counters, per object id, written by samplers and read by rate books."""

    def __init__(self) -> None:
        self._tracks: dict[str, _Track] = {}
        self._samplers: dict[int, RateSampler] = {}

    def attach(self, root: ConfiguredObject, interval: float = 1.0) -> RateSampler:
        """The sampler of the tree under ``root``: one for all who ask, until each :meth:`detach`."""
        sampler = self._samplers.get(id(root))
        if sampler is None or sampler.root is not root:
            sampler = self._samplers[id(root)] = RateSampler(root, self, interval)
        sampler.users += 1
        return sampler

    def detach(self, sampler: RateSampler) -> None:
        """One user of ``sampler`` is done; the last one takes its readings with it."""
        sampler.users -= 1
        if sampler.users > 0:
            return
        if self._samplers.get(id(sampler.root)) is sampler:
            del self._samplers[id(sampler.root)]
        sampler.forget_all()

    def reading(self, key: str, now: float, interval: float
                ) -> tuple[float, tuple[str, ...], tuple[int, ...]] | None:
        """(time, counter names, values) of ``key``'s newest reading at least ``interval``
        before ``now`` -- or its oldest, when younger -- None when nothing is known."""
        track = self._tracks.get(key)
        if track is None:
            return None
        target = now - interval
        runs = track.runs
        for since, until, values in reversed(runs):
            if since <= target:
                end = track.part.confirmed if until is None else until
                return (end if end < target else target), track.names, values
        since, _, values = runs[0]
        if now - since < interval * MIN_SPAN_SHARE:
            return None
        return since, track.names, values

    def __len__(self) -> int:
        return len(self._tracks)


class RateSampler:
    """Reads, in rounds, the counters of every object under ``root`` that has counters.

    Sans-IO: :meth:`sample` is one round, at the time it is given; whoever
    owns the event loop calls it (the management plugin, once a second).
    """

    def __init__(self, root: ConfiguredObject, history: CounterHistory,
                 interval: float = 1.0) -> None:
        self.root = root
        self.history = history
        self.interval = interval
        self.users = 0
        self.rounds = 0
        self.last_round: float | None = None
        self._groups: dict[tuple[int, str], _Group] = {}
        self._plans: dict[type, tuple[tuple[str, ...], tuple[Callable[[Any], Any], ...]]] = {}
        #: category -> (its classes may have counters, categories under it may)
        self._scopes: dict[str, tuple[bool, bool]] = {}

    def due(self, now: float) -> bool:
        """Whether a round is due (several callers may share the sampler: one round per interval)."""
        return self.last_round is None or now - self.last_round >= self.interval * 0.9

    def sample(self, now: float) -> int:
        """One round: read every object with counters; the number of objects read."""
        self.rounds += 1
        count = 0
        for parent, category, members in self._member_lists():
            count += self._sample_group(parent, category, members, now)
        for key, group in list(self._groups.items()):
            if group.round != self.rounds:              # its parent or category is gone
                del self._groups[key]
                self._forget(group.parts)
        self.last_round = now
        return count

    def forget_all(self) -> None:
        for group in self._groups.values():
            self._forget(group.parts)
        self._groups.clear()

    # -- reading the tree --------------------------------------------------------------

    def _member_lists(self) -> Iterator[tuple[ConfiguredObject, str, list[ConfiguredObject]]]:
        """(parent, category, children) for every category of children that may have
        counters, descending only where categories further down may have some."""
        pending = [self.root]
        while pending:
            obj = pending.pop()
            for category, members in obj._children.items():
                if not members:
                    continue
                scope = self._scopes.get(category)
                if scope is None:
                    scope = self._scopes[category] = (_counts(category),
                                                      _counts_below(category))
                counted, below = scope
                if counted or below:
                    listed = list(members.values())
                    if counted:
                        yield obj, category, listed
                    if below:
                        pending.extend(listed)

    def _plan(self, kind: type) -> tuple[tuple[str, ...], tuple[Callable[[Any], Any], ...]]:
        plan = self._plans.get(kind)
        if plan is None:
            counters = [(name, d) for name, d in derived_attributes(kind).items() if d.counter]
            plan = self._plans[kind] = (tuple(name for name, _ in counters),
                                        tuple(_reader(d, kind) for _, d in counters))
        return plan

    # -- one group ---------------------------------------------------------------------

    def _sample_group(self, parent: ConfiguredObject, category: str,
                      members: list[ConfiguredObject], now: float) -> int:
        key = (id(parent), category)
        group = self._groups.get(key)
        if group is not None and group.members == members:     # the same objects, in order
            group.round = self.rounds
            for part in group.parts:
                self._sample_part(part, now)
            return len(members)
        # members came or went (or the first round): regroup them by class, keeping the
        # readings of the objects that were there before
        by_kind: dict[type, list[ConfiguredObject]] = {}
        for member in members:
            by_kind.setdefault(type(member), []).append(member)
        parts: list[_Part] = []
        count = 0
        for kind, same in by_kind.items():
            names, computes = self._plan(kind)
            if computes:
                parts.append(self._new_part(same, names, computes, now))
                count += len(same)
        if group is not None:
            kept = {id(track) for part in parts for track in part.tracks}
            self._forget(group.parts, keep=kept)
        self._groups[key] = _Group(members, parts, self.rounds)
        return count

    def _sample_part(self, part: _Part, now: float) -> None:
        members = part.members
        columns = [list(map(compute, members)) for compute in part.computes]
        previous = part.confirmed
        if columns != part.columns:
            # which members moved: compared column by column in C, only where a column moved
            masks: list[Iterator[bool]] = [map(ne, new, old) for new, old
                                           in zip(columns, part.columns) if new != old]
            moved: Iterator[bool] = masks[0]
            for mask in masks[1:]:
                moved = map(or_, moved, mask)
            interval = self.interval
            tracks = part.tracks
            for index in compress(range(len(members)), moved):
                tracks[index].moved(now, previous, tuple([column[index] for column in columns]),
                                    interval)
            part.columns = columns
        part.confirmed = now

    def _new_part(self, members: list[ConfiguredObject], names: tuple[str, ...],
                  computes: tuple[Callable[[Any], Any], ...], now: float) -> _Part:
        columns = [list(map(compute, members)) for compute in computes]
        part = _Part(members, computes, columns, [], now)
        tracks = self.history._tracks
        interval = self.interval
        for member, values in zip(members, zip(*columns)):
            key = member.id
            track = tracks.get(key)
            if track is None or track.sampler is not self:
                track = tracks[key] = _Track(names, (now, None, values), part, self)
            else:
                if track.runs[-1][2] != values:
                    track.moved(now, track.part.confirmed, values, interval)
                track.part = part
            part.tracks.append(track)
        return part

    def _forget(self, parts: list[_Part], keep: set[int] | None = None) -> None:
        tracks = self.history._tracks
        for part in parts:
            for member, track in zip(part.members, part.tracks):
                if keep is not None and id(track) in keep:
                    continue
                key = member.id
                if tracks.get(key) is track:
                    del tracks[key]


def _counts(category: str) -> bool:
    """Whether a class of ``category`` (its base class or any subclass loaded) has counters."""
    classes: list[type] = [registry.category(category).base]
    while classes:
        cls = classes.pop()
        if any(d.counter for d in derived_attributes(cls).values()):
            return True
        classes.extend(cls.__subclasses__())
    return False


def _counts_below(category: str) -> bool:
    """Whether a category under ``category`` may have counters."""
    return any(_counts(child) or _counts_below(child) for child in registry.TREE.get(category, ()))


def _reader(decl: DerivedAttribute[Any], kind: type) -> Callable[[Any], Any]:
    """obj -> the counter's value: the method itself for a plain derived attribute."""
    if type(decl) is DerivedAttribute:
        return decl.compute

    def read(obj: Any) -> Any:
        return decl.__get__(obj, kind)
    return read


#: the history the management plugin's samplers fill and every :class:`RateBook` reads
SAMPLED = CounterHistory()


# -- answering reads --------------------------------------------------------------------

class _Readings:
    __slots__ = ("samples", "last_read")

    def __init__(self, now: float) -> None:
        #: (time, counter names, their values) oldest first
        self.samples: list[tuple[float, tuple[str, ...], tuple[int, ...]]] = []
        self.last_read = now


class RateBook:
    """Answers reads with rates: from the readings of ``history`` (the samplers'), or, until
    those go back a whole ``interval``, from its own taken at reads as well (at most one per
    ``interval``; forgotten ``horizon`` seconds after the object's last read)."""

    def __init__(self, interval: float = 1.0, horizon: float = 60.0,
                 history: CounterHistory | None = SAMPLED) -> None:
        self.interval = interval
        self.horizon = horizon
        self.history = history
        self._readings: dict[str, _Readings] = {}
        self._last_sweep = 0.0

    def rates(self, key: str, now: float, counters: Mapping[str, int]) -> dict[str, float]:
        """``{<counter>Rate: per second}`` for object ``key``, whose counters read ``counters`` now."""
        names = tuple(counters)
        found = self.rates_of(key, now, names, tuple(counters.values()))
        if found is None:
            return {rate_name(name): 0.0 for name in names}
        return {rate_name(name): rate for name, rate in zip(names, found)}

    def rates_of(self, key: str, now: float, names: tuple[str, ...],
                 values: tuple[int, ...]) -> list[float] | None:
        """The rates per second of counters ``names`` of object ``key``, which read ``values``
        now, in that order, or None when they are all 0 -- what :meth:`rates` gives,
        without a dict in and out: a list of 10,000 queues, most of them idle, asks
        for the same few counters of each."""
        target = now - self.interval
        best = None
        if self.history is not None:
            best = self.history.reading(key, now, self.interval)
            if best is not None and best[0] <= target:      # the common case: nothing written
                return _rates(now, best[0], names, values, best[1], best[2])
        # an object the samplers have not known for long (or at all): this book's own
        # readings of it, if older, tell more -- the read before a burst, say
        own = self._read(key, now, names, values)
        if own is not None and (best is None or own[0] <= target or own[0] < best[0]):
            best = own
        if best is None or now <= best[0]:
            return None
        return _rates(now, best[0], names, values, best[1], best[2])

    def _read(self, key: str, now: float, names: tuple[str, ...], values: tuple[int, ...]
              ) -> tuple[float, tuple[str, ...], tuple[int, ...]] | None:
        """This book's newest reading of ``key`` at least ``interval`` old (else its oldest),
        if any; the current one is kept as a reading too (at most one per ``interval``)."""
        readings = self._readings.get(key)
        if readings is None:
            readings = self._readings[key] = _Readings(now)
        readings.last_read = now
        samples = readings.samples
        interval = self.interval
        while len(samples) > 1 and now - samples[1][0] >= interval:
            del samples[0]                          # keep one reading at least `interval` old
        found = samples[0] if samples else None
        if not samples or now - samples[-1][0] >= interval:
            samples.append((now, names, values))
        if now - self._last_sweep >= self.horizon:
            self._sweep(now)
        return found

    def _sweep(self, now: float) -> None:
        self._last_sweep = now
        for key in [k for k, r in self._readings.items() if now - r.last_read > self.horizon]:
            del self._readings[key]

    def __len__(self) -> int:
        return len(self._readings)
