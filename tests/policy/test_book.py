"""Which policy holds for a (route, tenant) pair, and which endpoints a policy touches."""

from __future__ import annotations

from hasten.policy import ParamPolicy, PolicyBook, combine

MODEL = ParamPolicy(max_tokens_cap=1024, default_max_tokens=100)
TENANT = ParamPolicy(max_tokens_cap=64)


def body() -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5000}


def test_pairs_combine_the_route_and_the_tenant() -> None:
    book = PolicyBook({"gpt": MODEL, "other": None}, {"batch": TENANT})
    assert book.policy_for("gpt", "batch") == combine(MODEL, TENANT)
    assert book.policy_for("gpt", "web") == combine(MODEL, None)
    assert book.policy_for("other", "batch") == combine(None, TENANT)
    assert book.policy_for("unknown-route", "batch") == combine(None, TENANT)
    assert book.policy_for("other", "web") is None


def test_only_generation_endpoints_are_rewritten() -> None:
    book = PolicyBook({"gpt": MODEL}, {})
    applied = book.apply(body(), "chat", "gpt", "web")
    assert applied is not None and applied.body["max_tokens"] == 1024
    assert book.apply(body(), "completions", "gpt", "web") is not None
    assert book.apply(body(), "embeddings", "gpt", "web") is None
    assert book.apply({**body(), "max_tokens": 10}, "chat", "gpt", "web") is None


def test_an_empty_book_touches_nothing() -> None:
    book = PolicyBook()
    assert book.is_empty
    assert book.apply(body(), "chat", "*", "public") is None
    assert PolicyBook({"*": ParamPolicy()}, {}).is_empty
