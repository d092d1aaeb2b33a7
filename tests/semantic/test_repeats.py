"""Where the target admits only a repeated question, a lookup is decided by the text alone:
no embedding, the same decision, in the same partition, expired rows dropped, old files
given their text keys."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest

from hasten.semantic import matcher
from hasten.semantic.calibrated import E5
from hasten.semantic.calibration import CJK, LATIN, OTHER, Calibration, ScriptModel
from hasten.semantic.embedder import Vectors
from hasten.semantic.records import text_key
from hasten.semantic.store import NewEntry, SemanticCache, SemanticStoreConfig
from tests.support.semantic import Clock, WordsEmbedder, chat

# Like the shipped tables: no non-identical evidence is ever better than 0.85 precise.
MODEL = ScriptModel(
    weights=(0.0, 1.0, 0.0, 0.0, 0.0),
    bins=((0.0, 0.0), (0.2, 0.85)),
    center=0.9,
    scale=0.05,
    min_similarity=0.5,
)
REPEATS_ONLY = Calibration(WordsEmbedder.name, {LATIN: MODEL}, identical_precision=0.97)


def make(
    tmp_path: Path, *, target: float = 0.95, clock: Clock | None = None
) -> tuple[SemanticCache, WordsEmbedder]:
    embedder = WordsEmbedder()
    config = SemanticStoreConfig(path=tmp_path / "semantic.sqlite3", target_precision=target)
    cache = SemanticCache(embedder, config, clock=clock or Clock(), calibration=REPEATS_ONLY)
    return cache, embedder


async def test_a_repeated_question_hits_without_embedding(tmp_path: Path) -> None:
    cache, embedder = make(tmp_path)
    await cache.insert(chat("How do I cook rice?"), model="m", tenant="t", answer_key="k1")
    num_embedded = len(embedder.batches)
    match = await cache.lookup(chat("\nHow do I cook rice?  \n"), model="m", tenant="t")
    assert match is not None and match.answer_key == "k1"
    assert match.similarity == 1.0 and match.risk == pytest.approx(0.03)
    assert match.script == LATIN
    # A paraphrase, or the same words cased or spaced otherwise, is not served: and not
    # embedded.
    assert await cache.lookup(chat("how do i cook rice?"), model="m", tenant="t") is None
    assert await cache.lookup(chat("How do I  cook rice?"), model="m", tenant="t") is None
    assert await cache.lookup(chat("Rice: how do I cook it?"), model="m", tenant="t") is None
    assert len(embedder.batches) == num_embedded
    assert cache.counters["lookup_hit"] == 1 and cache.counters["hits"] == 1
    assert cache.counters["lookup_not_repeated"] == 3
    assert cache.script_stats()[LATIN]["not_repeated"] == 3
    await cache.close()


async def test_the_embedding_path_decides_the_same(tmp_path: Path) -> None:
    """At 0.8 this table's Latin evidence can reach the target, so every lookup embeds; a
    repeat is served there as the text path serves it at 0.95."""
    cache, _ = make(tmp_path)
    await cache.insert(chat("How do I cook rice?"), model="m", tenant="t", answer_key="k1")
    by_text = await cache.lookup(chat("How do I cook rice?\t"), model="m", tenant="t")
    await cache.close()
    reopened, embedder = make(tmp_path, target=0.8)  # nothing embedded yet
    result = await reopened.lookup(chat("How do I cook rice?\t"), model="m", tenant="t")
    assert embedder.batches == [1]
    assert by_text is not None and result is not None
    assert (result.entry_id, result.answer_key, result.risk) == (
        by_text.entry_id,
        by_text.answer_key,
        by_text.risk,
    )
    assert result.similarity == pytest.approx(1.0, abs=1e-3)  # stored as float16
    await reopened.close()


async def test_a_lower_target_embeds(tmp_path: Path) -> None:
    cache, embedder = make(tmp_path, target=0.8)
    await cache.insert(chat("How do I cook rice?"), model="m", tenant="t", answer_key="k1")
    num_embedded = len(embedder.batches)
    await cache.lookup(chat("How do I cook brown rice?"), model="m", tenant="t")
    assert len(embedder.batches) == num_embedded + 1
    await cache.close()


async def test_repeats_stay_in_their_partition(tmp_path: Path) -> None:
    cache, _ = make(tmp_path)
    question = "What is our refund policy?"
    await cache.insert(chat(question), model="m", tenant="a", answer_key="a1")
    assert await cache.lookup(chat(question), model="m", tenant="b") is None
    assert await cache.lookup(chat(question), model="m2", tenant="a") is None
    assert await cache.lookup(chat(question, system="Be terse."), model="m", tenant="a") is None
    assert await cache.lookup(chat(question, temperature=0.5), model="m", tenant="a") is None
    found = await cache.lookup(chat(question), model="m", tenant="a")
    assert found is not None and found.answer_key == "a1"
    await cache.close()


async def test_the_oldest_live_repeat_wins_and_expired_ones_go(tmp_path: Path) -> None:
    clock = Clock()
    cache, _ = make(tmp_path, clock=clock)
    await cache.insert(chat("Capital of Peru?"), model="m", tenant="t", answer_key="old", ttl_s=10)
    await cache.insert(
        chat("Capital of Peru?\n"), model="m", tenant="t", answer_key="new", ttl_s=60
    )
    first = await cache.lookup(chat("Capital of Peru?"), model="m", tenant="t")
    assert first is not None and first.answer_key == "old"
    clock.now += 30
    second = await cache.lookup(chat("Capital of Peru?"), model="m", tenant="t")
    assert second is not None and second.answer_key == "new"
    assert cache.counters["expired"] == 1 and await cache.count_entries() == 1
    clock.now += 60
    assert await cache.lookup(chat("Capital of Peru?"), model="m", tenant="t") is None
    await cache.close()


async def test_rows_without_a_text_key_are_never_served_by_text(tmp_path: Path) -> None:
    """Files from before text keys: their rows are in partitions of an older form, which no
    lookup reads; a lost hit, never a wrong one."""
    cache, _ = make(tmp_path)
    await cache.insert(chat("How do I cook rice?"), model="m", tenant="t", answer_key="k1")
    await cache.close()
    with sqlite3.connect(tmp_path / "semantic.sqlite3") as conn:  # as before the column
        conn.execute("UPDATE hasten_semantic_v1 SET text_key = NULL")
    reopened, _ = make(tmp_path)
    assert await reopened.lookup(chat("How do I cook rice?"), model="m", tenant="t") is None
    await reopened.close()


async def test_a_text_key_collision_is_not_a_hit(tmp_path: Path) -> None:
    cache, _ = make(tmp_path)
    await cache.insert(chat("How do I cook rice?"), model="m", tenant="t", answer_key="k1")
    await cache.close()
    with sqlite3.connect(tmp_path / "semantic.sqlite3") as conn:
        conn.execute("UPDATE hasten_semantic_v1 SET text_key = ?", (text_key("Other text"),))
    reopened, _ = make(tmp_path)
    assert await reopened.lookup(chat("Other text"), model="m", tenant="t") is None
    await reopened.close()


def test_text_keys_are_of_the_text_as_it_is() -> None:
    assert text_key("a b c") == text_key("a b c")
    for other in ("a\u3000b c", "a  b c", "ａ b c", "A b c"):  # no NFKC, spacing or case aside
        assert text_key(other) != text_key("a b c")


def test_the_shipped_table_serves_only_repeats_at_the_default() -> None:
    """The premise of the text path, for the default embedder: at 0.95 no script's
    non-identical evidence reaches the target; at 0.8 Latin does."""
    default = matcher.MatchPolicy(1.0, calibration=E5, max_risk=0.05)
    for script in (LATIN, CJK, OTHER):
        assert default.serves_only_repeats(script)
    assert default.serves_repeats
    lower = matcher.MatchPolicy(1.0, calibration=E5, max_risk=0.2)
    assert not lower.serves_only_repeats(LATIN)
    stricter = matcher.MatchPolicy(1.0, calibration=E5, max_risk=0.02)
    assert not stricter.serves_repeats  # 0.98 is above identical text's bound: nothing hits
    assert not matcher.MatchPolicy(0.9).serves_only_repeats(LATIN)


async def test_a_target_above_the_repeat_bound_serves_nothing(tmp_path: Path) -> None:
    cache, embedder = make(tmp_path, target=0.99)
    await cache.insert(chat("How do I cook rice?"), model="m", tenant="t", answer_key="k1")
    num_embedded = len(embedder.batches)
    assert await cache.lookup(chat("How do I cook rice?"), model="m", tenant="t") is None
    assert len(embedder.batches) == num_embedded
    await cache.close()


def _imports(num: int, tenant: str = "t") -> list[NewEntry]:
    return [
        NewEntry(chat(f"Imported question number {i}?"), "m", tenant, f"k{i}") for i in range(num)
    ]


async def test_an_import_is_served_by_text_at_once_and_by_meaning_once_filled(
    tmp_path: Path,
) -> None:
    """Where only repeats are served, an import stores its rows without embedding them (a
    repeat is found by its text); the vectors follow in the background, a few a model call."""
    cache, embedder = make(tmp_path)
    assert await cache.insert_many(_imports(40)) == 40
    assert embedder.batches == [] and cache.stats()["vectors_pending"] == 40
    found = await cache.lookup(chat("Imported question number 7?\n"), model="m", tenant="t")
    assert found is not None and found.answer_key == "k7" and found.similarity == 1.0
    await cache.wait_for_vectors()
    assert cache.stats()["vectors_pending"] == 0 and cache.counters["vectors_filled"] == 40
    assert sum(embedder.batches) == 40 and max(embedder.batches) <= 8
    await cache.close()
    lower, _ = make(tmp_path, target=0.8)  # every lookup embeds: the vectors must be right
    result = await lower.lookup(chat("Imported question number 33?"), model="m", tenant="t")
    assert result is not None and result.answer_key == "k33"
    assert result.similarity == pytest.approx(1.0, abs=1e-3)
    await lower.close()


async def test_a_lower_target_embeds_an_import_at_once(tmp_path: Path) -> None:
    cache, embedder = make(tmp_path, target=0.8)
    assert await cache.insert_many(_imports(20)) == 20
    assert sum(embedder.batches) == 20 and cache.stats()["vectors_pending"] == 0
    await cache.close()


async def test_rows_still_waiting_at_close_get_their_vectors_after_a_restart(
    tmp_path: Path,
) -> None:
    cache, _ = make(tmp_path)
    await cache.insert_many(_imports(30))
    await cache.close()  # before the filler ran
    reopened, embedder = make(tmp_path, target=0.8)
    result = await reopened.lookup(chat("Imported question number 3?"), model="m", tenant="t")
    assert result is None  # not in the index until filled: a lost hit, never a wrong one
    await reopened.wait_for_vectors()
    assert reopened.stats()["vectors_pending"] == 0 and reopened.counters["vectors_filled"] == 30
    assert sum(embedder.batches) == 30  # the lookup's embedding is remembered for its row
    again = await reopened.lookup(chat("Imported question number 3?"), model="m", tenant="t")
    assert again is not None and again.answer_key == "k3"
    await reopened.close()


async def test_a_row_removed_while_waiting_is_not_filled(tmp_path: Path) -> None:
    cache, _ = make(tmp_path)
    await cache.insert_many([*_imports(10, tenant="gone"), *_imports(5, tenant="kept")])
    await cache.invalidate(tenant="gone")
    await cache.wait_for_vectors()
    assert cache.counters["vectors_filled"] == 5 and await cache.count_entries() == 5
    await cache.close()


async def test_a_broken_model_leaves_the_rows_waiting_and_is_not_asked_per_lookup(
    tmp_path: Path,
) -> None:
    class Broken(WordsEmbedder):
        def embed(self, texts: Sequence[str]) -> Vectors:
            self.batches.append(len(texts))
            raise OSError("model gone")

    embedder = Broken()
    config = SemanticStoreConfig(path=tmp_path / "semantic.sqlite3")
    cache = SemanticCache(embedder, config, clock=Clock(), calibration=REPEATS_ONLY)
    assert await cache.insert_many(_imports(12)) == 12
    await cache.wait_for_vectors()
    assert cache.counters["vector_fill_errors"] == 1 and cache.stats()["vectors_pending"] == 12
    for _ in range(5):  # served by text meanwhile; no fill retried on each lookup
        found = await cache.lookup(chat("Imported question number 1?"), model="m", tenant="t")
        assert found is not None and found.answer_key == "k1"
    await asyncio.sleep(0)
    assert embedder.batches == [8]
    await cache.close()


# A repeat is the same text, its ends trimmed; nothing else is proven not to change the answer.
NOT_REPEATS = [
    ("What is 10² + 1?", "What is 102 + 1?"),  # NFKC reads ² as 2
    ("What is ½ of 8?", "What is 1⁄2 of 8?"),
    (
        "Explain:\ndef f(x):\n    if x:\n        return 1\n    return 2",
        "Explain:\ndef f(x):\n    if x:\n        return 1\n        return 2",
    ),
    ("How long is the string 'a  b'?", "How long is the string 'a b'?"),
    ("a  b", "a b"),
    ("Is\tthis a tab?", "Is this a tab?"),
]


@pytest.mark.parametrize(("stored", "asked"), NOT_REPEATS)
async def test_a_repeat_is_the_same_text(tmp_path: Path, stored: str, asked: str) -> None:
    cache, _ = make(tmp_path)
    await cache.insert(chat(stored), model="m", tenant="t", answer_key="k1")
    assert await cache.lookup(chat(asked), model="m", tenant="t") is None
    await cache.insert(chat(asked), model="m", tenant="t", answer_key="k2")
    for text, key in ((stored, "k1"), (asked, "k2")):
        found = await cache.lookup(chat(text), model="m", tenant="t")
        assert found is not None and found.answer_key == key
    await cache.close()


@pytest.mark.parametrize(("stored", "asked"), NOT_REPEATS[:4])
async def test_the_embedding_path_never_takes_them_for_identical(
    tmp_path: Path, stored: str, asked: str
) -> None:
    """At 0.8 every lookup embeds; bag-of-words vectors of a respaced text are equal, so only
    the guard and the identity rule stand between the two. (Prose on one line spaced
    otherwise, the last two pairs, may be served there at a paraphrase's risk.)"""
    cache, _ = make(tmp_path, target=0.8)
    await cache.insert(chat(stored), model="m", tenant="t", answer_key="k1")
    result = await cache.lookup(chat(asked), model="m", tenant="t")
    assert result is None
    await cache.close()


async def test_trailing_whitespace_and_leading_blank_lines_are_a_repeat(tmp_path: Path) -> None:
    cache, _ = make(tmp_path)
    await cache.insert(chat("    x = 1\nWhat is x?"), model="m", tenant="t", answer_key="k1")
    for asked in ("    x = 1\nWhat is x?\n", "\n  \n    x = 1\nWhat is x?  \t\n"):
        found = await cache.lookup(chat(asked), model="m", tenant="t")
        assert found is not None and found.answer_key == "k1"
    # The first line's own indentation is not trimmed: it may be code's.
    assert await cache.lookup(chat("x = 1\nWhat is x?"), model="m", tenant="t") is None
    await cache.close()


async def test_text_parts_are_a_repeat_only_split_alike(tmp_path: Path) -> None:
    def parts(*texts: str) -> dict[str, object]:
        content = [{"type": "text", "text": text} for text in texts]
        return {"model": "gpt-x", "messages": [{"role": "user", "content": content}]}

    cache, _ = make(tmp_path)
    await cache.insert(parts("What is ", "ab?"), model="m", tenant="t", answer_key="k1")
    assert await cache.lookup(parts("What is a", "b?"), model="m", tenant="t") is None
    assert await cache.lookup(chat("What is \nab?"), model="m", tenant="t") is None
    found = await cache.lookup(parts("What is ", "ab?"), model="m", tenant="t")
    assert found is not None and found.answer_key == "k1"
    await cache.close()
