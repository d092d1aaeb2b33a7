"""The calibrated store end to end with a scripted verifier: clear hits skip it, close calls
ask it, its verdict and the risk travel with the match, counters by script."""

from __future__ import annotations

from pathlib import Path

import pytest

from hasten.semantic import calibration, verifier
from hasten.semantic.calibration import Calibration, ScriptModel
from hasten.semantic.store import SemanticCache, SemanticStoreConfig
from tests.support.semantic import Clock, WordsEmbedder, chat

# Embedding only: safe from cosine 0.99 up, a close call (risk 0.5) below.
# Verified: safe when the verifier says >= 0.9.
ALONE = ScriptModel((-40.0, 44.4, 0.0, 0.0, 0.0), ((0.0, 0.5), (0.5, 0.99)), 0.9, 0.1, 0.5)
WITH = ScriptModel((-1.0, 0.0, 0.0, 0.0, 0.0, 10.0), ((0.0, 0.0), (0.5, 0.99)), 0.9, 0.1, 0.5)
CALIBRATION = Calibration(
    "test/words", {calibration.LATIN: ALONE}, verifier="fake", verified={calibration.LATIN: WITH}
)


class FakeVerifier:
    name = "fake"

    def __init__(self, similarity: float) -> None:
        self.asked: list[tuple[str, str]] = []
        self._similarity = similarity

    def similarity(self, query: str, candidate: str) -> float:
        self.asked.append((query, candidate))
        return self._similarity


def _cache(tmp_path: Path, second: FakeVerifier | None) -> SemanticCache:
    config = SemanticStoreConfig(path=tmp_path / "s.sqlite3", target_precision=0.95)
    return SemanticCache(
        WordsEmbedder(), config, clock=Clock(), verifier=second, calibration=CALIBRATION
    )


async def _insert(cache: SemanticCache) -> None:
    await cache.insert(chat("how do i cook white rice"), model="m", tenant="t", answer_key="k")


async def test_clear_hit_skips_the_verifier(tmp_path: Path) -> None:
    fake = FakeVerifier(0.95)
    cache = _cache(tmp_path, fake)
    await _insert(cache)
    match = await cache.lookup(chat("white rice how do i cook"), model="m", tenant="t")
    assert match is not None and match.risk is not None and match.risk < 0.05
    assert match.verdict is None and fake.asked == []
    stats = cache.stats()
    assert stats["target_precision"] == 0.95 and stats["min_similarity"] is None
    assert stats["by_script"]["latin"]["hits"] == 1
    await cache.close()


async def test_close_call_is_served_only_if_the_verifier_agrees(tmp_path: Path) -> None:
    for similarity, is_served in ((0.95, True), (0.5, False)):
        fake = FakeVerifier(similarity)
        cache = _cache(tmp_path / str(similarity), fake)
        await _insert(cache)
        # One word more: cosine about 0.91, too risky for the embedding alone.
        match = await cache.lookup(chat("how do i cook white rice fast"), model="m", tenant="t")
        assert fake.asked == [("how do i cook white rice fast", "how do i cook white rice")]
        assert (match is not None) == is_served
        stats = cache.stats()
        assert stats["verifier_runs"] == 1
        if is_served:
            assert match is not None and match.verdict == "agreed"
            assert stats["verifier_agreed"] == 1
        else:
            assert stats["verifier_disagreed"] == 1 and stats["by_script"]["latin"]["misses"] == 1
        await cache.close()


async def test_without_a_verifier_close_calls_miss(tmp_path: Path) -> None:
    cache = _cache(tmp_path, None)
    await _insert(cache)
    assert await cache.lookup(chat("how do i cook white rice fast"), model="m", tenant="t") is None
    assert cache.stats()["lookup_risky"] == 1
    await cache.close()


def test_build_verifier_names() -> None:
    assert verifier.build_verifier("none") is None
    with pytest.raises(ValueError, match="expected one of none, use"):
        verifier.build_verifier("llm")


def test_use_verifier_scores_a_paraphrase_above_an_unrelated_question() -> None:
    model = verifier.UseVerifier()
    paraphrase = model.similarity("How do I cook rice?", "What is the way to cook rice?")
    unrelated = model.similarity("How do I cook rice?", "Who painted the Mona Lisa?")
    assert -1.0 <= unrelated < paraphrase <= 1.0
    assert model.embed(["How do I cook rice?"]).shape == (1, model.dim)
