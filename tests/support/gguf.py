"""Model preparers for ``GgufEmbedder`` children in tests: module-level, so they pickle."""

from __future__ import annotations

import time
from pathlib import Path

from hasten.semantic import nomic


def nomic_model(num_threads: int) -> Path:
    """The real nomic model (the semantic-nomic extra), prepared once per model directory."""
    return nomic.prepare_model(num_threads)


def broken_model(num_threads: int) -> Path:
    raise RuntimeError("this model file is damaged")


def hanging_model(num_threads: int) -> Path:
    time.sleep(3600)
    raise AssertionError("unreachable")


def slow_nomic_model(num_threads: int) -> Path:
    """The real model after a slow start, as a first start that extracts and quantises."""
    time.sleep(2.0)
    return nomic.prepare_model(num_threads)
