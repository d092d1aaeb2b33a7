"""The lock-free families, exported and read back by prometheus_client's own parser."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from hasten.metrics.families import CounterFamily, HistogramFamily, export_all


class _Export(Collector):
    def __init__(self, *families: HistogramFamily | CounterFamily) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return export_all(self._families)


def _samples(*families: HistogramFamily | CounterFamily) -> dict[tuple[str, str], float]:
    registry = CollectorRegistry()
    registry.register(_Export(*families))
    text = generate_latest(registry).decode()
    return {
        (s.name, s.labels.get("le", s.labels.get("k", ""))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_histogram_buckets_are_cumulative_with_an_inf_bucket() -> None:
    family = HistogramFamily("h_seconds", "doc", ("k",), (0.1, 1.0))
    child = family.child("x")
    assert family.child("x") is child  # cached per label tuple
    child.observe(0.05)
    child.observe(0.1)  # a bound is inclusive ("le")
    child.observe_many([0.5, 7.0])
    samples = _samples(family)
    assert samples[("h_seconds_bucket", "0.1")] == 2
    assert samples[("h_seconds_bucket", "1.0")] == 3
    assert samples[("h_seconds_bucket", "+Inf")] == 4
    assert samples[("h_seconds_count", "x")] == 4
    assert samples[("h_seconds_sum", "x")] == 0.05 + 0.1 + 0.5 + 7.0


def test_counter_children_by_label() -> None:
    family = CounterFamily("c", "doc", ("k",))
    family.child("a").inc()
    family.child("a").inc(2.5)
    family.child("b").inc()
    samples = _samples(family)
    assert samples[("c_total", "a")] == 3.5 and samples[("c_total", "b")] == 1
