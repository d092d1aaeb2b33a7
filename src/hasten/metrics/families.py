"""Lock-free metric families for the request path, exported through a collector.

prometheus_client's own ``Histogram.observe`` walks its buckets in Python and takes two
locks; ``Counter.inc`` one. Everything here is updated on the event loop's thread only, so
a bucket is found with ``bisect`` and bumped in a plain list, with no lock. A scrape reads
the same lists (on the loop, or on the metrics port's thread, where the GIL keeps each read
whole; a scrape racing a request may see its sum before its bucket, never a torn value).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from itertools import accumulate

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString


class HistogramChild:
    """One label tuple's histogram: bucket counts (the last is +Inf), sum."""

    __slots__ = ("_bounds", "buckets", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.buckets = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.buckets[bisect.bisect_left(self._bounds, value)] += 1
        self.sum += value

    def observe_many(self, values: Sequence[float]) -> None:
        buckets, bounds = self.buckets, self._bounds
        for value in values:
            buckets[bisect.bisect_left(bounds, value)] += 1
        self.sum += sum(values)


class CounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class HistogramFamily:
    """A histogram's children by label values; ``child`` creates one on first use."""

    def __init__(
        self, name: str, documentation: str, labels: Sequence[str], bounds: Sequence[float]
    ) -> None:
        self.name, self.documentation, self.labels = name, documentation, tuple(labels)
        self.bounds = tuple(float(b) for b in bounds)
        self.children: dict[tuple[str, ...], HistogramChild] = {}

    def child(self, *values: str) -> HistogramChild:
        child = self.children.get(values)
        if child is None:
            child = self.children[values] = HistogramChild(self.bounds)
        return child

    def export(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labels)
        bounds = [*(floatToGoString(b) for b in self.bounds), "+Inf"]  # type: ignore[no-untyped-call]
        for values, child in list(self.children.items()):
            cumulative = list(accumulate(child.buckets))
            family.add_metric(list(values), list(zip(bounds, cumulative, strict=True)), child.sum)
        return family


class CounterFamily:
    """A counter's children by label values (the name without ``_total``)."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str]) -> None:
        self.name, self.documentation, self.labels = name, documentation, tuple(labels)
        self.children: dict[tuple[str, ...], CounterChild] = {}

    def child(self, *values: str) -> CounterChild:
        child = self.children.get(values)
        if child is None:
            child = self.children[values] = CounterChild()
        return child

    def export(self) -> Metric:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labels)
        for values, child in list(self.children.items()):
            family.add_metric(list(values), child.value)
        return family


def export_all(families: Sequence[HistogramFamily | CounterFamily]) -> Iterator[Metric]:
    for family in families:
        yield family.export()
