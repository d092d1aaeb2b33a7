"""Fakes for semantic-cache tests: a bag-of-words embedder, a hand-set clock, chat bodies,
a cache on a temporary file, a bounded poll for what replicas see eventually, and a fresh
interpreter for what one process loads."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hasten.semantic.embedder import Vectors, normalize
from hasten.semantic.store import SemanticCache, SemanticStoreConfig


class WordsEmbedder:
    """Bag of hashed words: same words in any order and case embed identically."""

    name = "test/words"
    dim = 64

    def __init__(self) -> None:
        self.batches: list[int] = []

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.batches.append(len(texts))
        rows = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
                rows[row, int.from_bytes(digest, "little") % self.dim] += 1.0
        return normalize(rows)


class Clock:
    """Time that moves only when a test sets ``now``."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def chat(*turns: str, system: str | None = None, **fields: Any) -> dict[str, Any]:
    """A chat body whose turns alternate user, assistant, user, ..."""
    messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
    for index, turn in enumerate(turns):
        messages.append({"role": "user" if index % 2 == 0 else "assistant", "content": turn})
    return {"model": "gpt-x", "messages": messages, **fields}


def make_cache(path: Path, clock: Clock | None = None, **overrides: Any) -> SemanticCache:
    """A semantic cache under ``path`` with the words embedder and a 0.9 cut-off."""
    settings: dict[str, Any] = {"min_similarity": 0.9, **overrides}
    config = SemanticStoreConfig(path=path / "semantic.sqlite3", **settings)
    return SemanticCache(WordsEmbedder(), config, clock=clock or Clock())


async def eventually(check: Callable[[], Awaitable[Any]], *, num_tries: int = 250) -> Any:
    """Polls until ``check`` returns something truthy (bounded by tries, not by a deadline)."""
    for _ in range(num_tries):
        result = await check()
        if result:
            return result
        await asyncio.sleep(0.02)
    raise AssertionError("condition never held")


def rebuilt(cache: SemanticCache, num_rebuilds: int) -> Callable[[], Awaitable[bool]]:
    """A check for ``eventually``: the cache's follower has finished ``num_rebuilds``
    rebuilds. It counts one after the rebuilt entries are visible, so a lookup can see them
    before the count moves."""

    async def check() -> bool:
        return cache.replica is not None and cache.replica.num_rebuilds == num_rebuilds

    return check


def python_stdout(script: str) -> str:
    """What ``script`` prints in a fresh interpreter (stripped), with this checkout's
    ``hasten`` and ``bench`` importable; fails the test if it does not exit cleanly (a
    native library that crashes on load, say)."""
    repo = Path(__file__).resolve().parents[2]
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)])}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()
