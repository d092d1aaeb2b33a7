"""bench/semantic/evaluate.py: protocol v2's scoring rules, v1 beside it, the one-object JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.semantic import evaluate
from bench.semantic.evaluate import Pair
from tests.support.semantic import WordsEmbedder, make_cache

# The words embedder gives word-order paraphrases similarity 1 and "peru" / "chile" about 0.83.
PAIRS = [
    Pair("how do i cook rice", "cook rice how do i", 1),
    Pair("how do i cook rice", "rice how do i cook", 1),  # shares its a: stored once
    Pair("what is the capital of peru", "what is the capital of chile", 0),
    Pair(" best way to learn python ", "how do i cook rice", 0),  # b is a stored a, verbatim
    Pair("tell me a joke", "joke tell me a", 0),  # same words, labelled different: false hit
]


def test_verdicts() -> None:
    assert evaluate.verdict(Pair("q one", "q two", 1), " q one ") == "correct"
    assert evaluate.verdict(Pair("q one", "q two", 1), "q three") == "wrong"
    assert evaluate.verdict(Pair("q one", "q two", 0), "q one") == "false"
    # A stored question equal to the asked one is a correct hit whatever the label.
    assert evaluate.verdict(Pair("q one", "q two", 0), "q two ") == "correct"
    assert evaluate.verdict(Pair("q one", "q two", 1), "q two") == "correct"


def test_distinct_questions_are_stored_once() -> None:
    assert evaluate.stored_questions(PAIRS) == [
        "how do i cook rice",
        "what is the capital of peru",
        "best way to learn python",
        "tell me a joke",
    ]
    assert len(evaluate.stored_questions(PAIRS, protocol="v1")) == len(PAIRS)
    stored = set(evaluate.stored_questions(PAIRS))
    answerable = [evaluate.is_answerable(pair, stored) for pair in PAIRS]
    assert answerable == [True, True, False, True, False]


async def test_protocol_v2_counts_with_v1_beside(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, min_similarity=0.9)
    outcomes = await evaluate.evaluate(PAIRS, cache)
    assert cache.stats()["entries"] == 4
    result = evaluate.metrics(outcomes, PAIRS)
    assert (result["correct"], result["wrong"], result["false"]) == (3, 0, 1)
    assert result["answerable"] == 3 and result["recall"] == 1.0
    assert result["precision"] == 0.75 and result["false_hit_rate"] == 1 / 5
    assert result["hits_on_identical_text"] == 1
    # v1 scored the verbatim repeat false and counted recall over label-1 rows.
    v1 = result["v1"]
    assert (v1["correct"], v1["false"], v1["precision"], v1["recall"]) == (2, 2, 0.5, 1.0)
    await cache.close()


async def test_protocol_v1_layout_stores_every_row(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, min_similarity=0.9)
    outcomes = await evaluate.evaluate(PAIRS, cache, protocol="v1")
    assert cache.stats()["entries"] == len(PAIRS)
    assert len(outcomes.stored) == len(PAIRS)
    await cache.close()


def test_a_cut_off_applied_afterwards_only_removes_hits(tmp_path: Path) -> None:
    outcomes = evaluate.Outcomes(
        stored=["q one", "q two"],
        rows=[0, 1],
        served=[0, 1],
        similarities=[0.99, 0.91],
        risks=[0.01, 0.2],
    )
    pairs = [Pair("q one", "q uno", 1), Pair("q two", "q dos", 1)]
    assert evaluate.metrics(outcomes, pairs)["correct"] == 2
    assert evaluate.metrics(outcomes, pairs, min_similarity=0.95)["correct"] == 1
    assert evaluate.metrics(outcomes, pairs, max_risk=0.05)["recall"] == 0.5


def test_json_prints_one_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(vars_of(pair)) + "\n" for pair in PAIRS))
    monkeypatch.setattr(evaluate, "build_embedder", lambda kind: WordsEmbedder())
    assert evaluate.main([str(path), "--json", "--min-similarity", "0.9"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)  # exactly one JSON document on stdout
    assert report["precision"] == 0.75 and report["recall"] == 1.0
    assert report["false_hit_rate"] == 0.2 and report["v1"]["precision"] == 0.5
    assert report["protocol"] == "v2" and report["num_stored"] == 4
    assert "precision 0.750" in captured.err


def vars_of(pair: Pair) -> dict[str, Any]:
    return {"a": pair.a, "b": pair.b, "label": pair.label}


async def test_evaluate_protocol_counts(tmp_path: Path) -> None:
    pairs = [
        evaluate.Pair("how do i cook rice", "cook rice how do i", 1),
        evaluate.Pair("best way to learn python", "learn python best way", 1),
        evaluate.Pair("what is the capital of peru", "capital of chile", 0),
    ]
    cache = make_cache(tmp_path, min_similarity=0.8)
    outcomes = await evaluate.evaluate(pairs, cache)
    result = evaluate.metrics(outcomes, pairs, min_similarity=0.8)
    assert result["correct"] == 2 and result["false"] == 0
    assert result["precision"] == 1.0 and result["recall"] == 1.0
    await cache.close()
