"""FrontMemo: the kept fronts of repeated bodies, bounded in entries and bytes (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hasten.cache import CacheDecision
from hasten.config import GatewayConfig, ModelRoute
from hasten.proxy.fronts import Front, FrontMemo
from hasten.routing.models import ModelRouter
from tests.support.scripted import upstream

_CONFIG = GatewayConfig(
    upstreams={"a": upstream("a")}, models={"gpt": ModelRoute(name="gpt", upstream="a")}
)
_MODEL = ModelRouter(_CONFIG).resolve("gpt")
_DECISION = CacheDecision(True, True, "cacheable", None, 60.0)


def _front(content: str = "hi") -> Front:
    body = {"model": "gpt", "messages": [{"role": "user", "content": content}]}
    return Front(body, _MODEL, (), False, False, False, True, _DECISION, ("r", "k"))


def test_a_front_is_found_by_its_exact_bytes_endpoint_and_tenant() -> None:
    memo = FrontMemo()
    front = _front()
    assert memo.put("chat", "t1", b'{"a":1}', front)
    assert memo.get("chat", "t1", b'{"a":1}') is front
    assert memo.get("chat", "t1", b'{"a": 1}') is None  # other bytes, even if the same JSON
    assert memo.get("chat", "t2", b'{"a":1}') is None  # another tenant's policy may differ
    assert memo.get("completions", "t1", b'{"a":1}') is None


def test_a_body_over_the_limit_is_not_kept() -> None:
    memo = FrontMemo(max_body_bytes=8)
    assert not memo.put("chat", "t", b"123456789", _front())
    assert memo.put("chat", "t", b"12345678", _front())
    assert len(memo) == 1 and memo.size_bytes == 8


def test_the_least_recently_used_front_goes_first() -> None:
    memo = FrontMemo(max_entries=2)
    memo.put("chat", "t", b"a", _front())
    memo.put("chat", "t", b"b", _front())
    assert memo.get("chat", "t", b"a") is not None  # now b is the least recently used
    memo.put("chat", "t", b"c", _front())
    assert memo.get("chat", "t", b"b") is None
    assert memo.get("chat", "t", b"a") is not None and memo.get("chat", "t", b"c") is not None


def test_a_zero_sized_memo_keeps_nothing() -> None:
    memo = FrontMemo(max_entries=0)
    assert not memo.put("chat", "t", b"a", _front())
    assert len(memo) == 0


_PUTS = st.lists(
    st.tuples(st.sampled_from(["t1", "t2"]), st.binary(min_size=0, max_size=40)), max_size=60
)


@given(_PUTS, st.integers(1, 8), st.integers(1, 120), st.integers(0, 50))
def test_bounds_hold_and_the_byte_count_is_exact(
    puts: list[tuple[str, bytes]], max_entries: int, max_bytes: int, max_body_bytes: int
) -> None:
    memo = FrontMemo(max_entries=max_entries, max_bytes=max_bytes, max_body_bytes=max_body_bytes)
    kept: dict[tuple[str, bytes], None] = {}  # a reference LRU, oldest first
    for tenant, raw in puts:
        is_kept = memo.put("chat", tenant, raw, _front())
        assert is_kept == (len(raw) <= max_body_bytes)
        if is_kept:
            kept.pop((tenant, raw), None)
            kept[(tenant, raw)] = None
            while len(kept) > max_entries or sum(len(r) for _, r in kept) > max_bytes:
                del kept[next(iter(kept))]
        assert len(memo) <= max_entries and memo.size_bytes <= max_bytes
        assert memo.size_bytes == sum(len(r) for _, r in kept)
    for tenant, raw in puts:
        assert (memo.get("chat", tenant, raw) is not None) == ((tenant, raw) in kept)
