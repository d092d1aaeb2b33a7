"""The bundled e5 embedder: unit vectors, meaning-ordered, thread count tuned by measurement."""

from __future__ import annotations

import numpy as np

from hasten.semantic.embedder import E5Embedder


def test_e5_vectors_are_unit_length_and_ordered_by_meaning() -> None:
    embedder = E5Embedder()
    question, paraphrase, other, chinese = embedder.embed(
        [
            "How do I cook rice in a pot?",
            "What is the way to cook rice in a pot?",
            "Who won the football world cup in 2018?",
            "怎么用锅煮米饭？",
        ]
    )
    for vector in (question, paraphrase, other, chinese):
        assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-4
    assert float(question @ paraphrase) > float(question @ other)
    assert float(question @ chinese) > float(question @ other)  # one space for both languages
    assert embedder.embed([]).shape == (0, embedder.dim)


def test_thread_count_is_measured_unless_fixed() -> None:
    tuned = E5Embedder()
    for _ in range(12):
        tuned.embed(["How many threads should a small encoder use on two cores?"])
    assert tuned.tuner.probe_every_steps > 0
    assert tuned.tuner.best_modes()  # measured steps were recorded per size bucket
    fixed = E5Embedder(num_threads=1)
    fixed.embed(["How many threads should a small encoder use on two cores?"])
    assert fixed.tuner.probe_every_steps == 0 and fixed.tuner.max_threads == 1
    assert fixed.tuner.best_modes() == {}  # nothing tuned: one thread every time
