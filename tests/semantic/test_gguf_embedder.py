"""The GGUF embedder's child process with the real nomic model: vectors, the repack
buffers on this CPU, a crash, a hang and a model that cannot load; none takes pytest down."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import numpy as np
import pytest

from hasten.local.supervisor import RestartSettings
from hasten.semantic import nomic
from hasten.semantic.gguf_embedder import ChildSettings, EmbedderUnavailable, GgufEmbedder
from tests.support import gguf

QUICK_RESTART = RestartSettings(backoff_base_s=0.05, backoff_max_s=0.05)


@pytest.fixture(scope="module")
def embedder() -> Iterator[GgufEmbedder]:
    child = GgufEmbedder(
        nomic.NAME, gguf.nomic_model, settings=ChildSettings(restart=QUICK_RESTART)
    )
    child.wait_ready()
    yield child
    child.close()


def test_paraphrases_are_closer_than_other_questions(embedder: GgufEmbedder) -> None:
    rows = embedder.embed(
        [
            nomic.PREFIX + "How can I improve my English?",
            nomic.PREFIX + "How do I get better at English?",
            nomic.PREFIX + "What is the capital of France?",
        ]
    )
    assert rows.shape == (3, nomic.DIM) and embedder.dim == nomic.DIM
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-4)
    assert float(rows[0] @ rows[1]) > float(rows[0] @ rows[2]) + 0.2


def test_a_batch_gives_each_text_the_vector_it_gets_alone(embedder: GgufEmbedder) -> None:
    texts = [f"question number {i} about {'a long topic ' * (i % 5)}" for i in range(40)]
    together = embedder.embed(texts)  # several llama.cpp batches of up to 16 sequences
    alone = np.stack([embedder.embed([text])[0] for text in texts[:5]])
    # Q8_0: 0.9997 here; Q4_K_M's 0.990-0.995 would fail this (nomic.py says why it matters).
    assert float(np.min(np.sum(together[:5] * alone, axis=1))) > 0.999


def test_repack_buffers_give_the_same_vectors_on_this_cpu() -> None:
    """Quantised embedders crashed in llama_encode with repacked weights on AMX CPUs; the
    portable build has no AMX kernels. With repacking on, the child must still answer, and
    with the same vectors (it is off in production either way)."""
    repacked = GgufEmbedder(
        nomic.NAME,
        gguf.nomic_model,
        settings=ChildSettings(restart=QUICK_RESTART, has_repack_buffers=True),
    )
    plain = GgufEmbedder(nomic.NAME, gguf.nomic_model, settings=ChildSettings())
    texts = [nomic.PREFIX + "Why is the sky blue?", nomic.PREFIX + "天空为什么是蓝色的？"]
    try:
        repacked.wait_ready()
        plain.wait_ready()
        assert np.allclose(repacked.embed(texts), plain.embed(texts), atol=2e-2)
    finally:
        repacked.close()
        plain.close()


def test_a_crashed_child_costs_one_call_and_is_restarted(embedder: GgufEmbedder) -> None:
    embedder.embed(["warm"])
    pid = embedder.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(EmbedderUnavailable, match="died"):
        embedder.embed(["after the crash"])
    deadline = time.monotonic() + 60
    while True:  # the restart waits out its backoff, then loads again
        try:
            rows = embedder.embed(["after the restart"])
            break
        except EmbedderUnavailable:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert rows.shape == (1, nomic.DIM) and embedder.pid not in (None, pid)


def test_calls_while_the_model_loads_fail_at_once_and_leave_the_load_alone() -> None:
    child = GgufEmbedder(nomic.NAME, gguf.slow_nomic_model)
    child.start()
    pid = child.pid
    started = time.monotonic()
    with pytest.raises(EmbedderUnavailable, match="still loading"):
        child.embed(["too early"])
    assert time.monotonic() - started < 1.0  # no wait on the store's worker thread
    child.wait_ready()
    assert child.embed(["in time"]).shape == (1, nomic.DIM)
    assert child.pid == pid and child.num_starts == 1
    child.close()


def test_a_model_that_cannot_load_turns_the_embedder_off() -> None:
    child = GgufEmbedder("broken", gguf.broken_model)
    with pytest.raises(EmbedderUnavailable, match="damaged"):
        child.wait_ready(timeout_s=60)
    with pytest.raises(EmbedderUnavailable, match="down"):
        child.embed(["anything"])
    assert child.num_starts == 1


def test_a_child_that_never_loads_is_killed_after_the_start_timeout() -> None:
    child = GgufEmbedder(
        "hanging",
        gguf.hanging_model,
        settings=ChildSettings(start_timeout_s=0.5, restart=QUICK_RESTART),
    )
    child.start()
    pid = child.pid
    with pytest.raises(EmbedderUnavailable, match="still loading"):
        child.embed(["anything"])
    time.sleep(0.6)
    with pytest.raises(EmbedderUnavailable, match=r"did not load within 0\.5 s"):
        child.embed(["anything"])
    assert child.pid is None and pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    child.close()


def test_a_call_without_an_answer_in_time_kills_the_child(embedder: GgufEmbedder) -> None:
    """A hung call (here: one the child cannot finish within a too short timeout) ends the
    child; the next call starts a new one."""
    hurried = GgufEmbedder(
        nomic.NAME,
        gguf.nomic_model,
        settings=ChildSettings(call_timeout_s=0.0, per_text_timeout_s=1e-6, restart=QUICK_RESTART),
    )
    hurried.wait_ready()
    pid = hurried.pid
    with pytest.raises(EmbedderUnavailable, match="did not answer within"):
        hurried.embed(["a question long enough to take more than a few microseconds " * 20])
    assert hurried.pid is None and pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    hurried.close()


def test_client_controlled_sizes_are_bounded(embedder: GgufEmbedder) -> None:
    with pytest.raises(ValueError):
        embedder.embed(["x"] * 10_000)
    with pytest.raises(ValueError):
        embedder.embed(["x" * 100_000])
    assert embedder.embed([]).shape == (0, nomic.DIM)
