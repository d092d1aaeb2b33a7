"""The prompt sequence a load run sends: pure and deterministic for a given spec and seed.

A workload is a *source* of unique prompts (a file, or synthetic text made on demand) plus an
*order* in which requests pick them: round-robin, a repeat ratio, or Zipf popularity.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import orjson

# Zipf needs a finite population; this is the default when --num-unique is not given.
DEFAULT_ZIPF_NUM_UNIQUE = 1000

_WORD_TEXT = (
    "alpha bravo cache delta echo fast gateway harbor index jitter kernel latency memory "
    "network orbit packet query river stream token upstream vector window yield zone "
    "answer bridge cluster design engine future garden history island journey knowledge "
    "language market nature ocean planet question reason science theory universe voyage"
)
_WORDS = tuple(_WORD_TEXT.split())


@dataclass(frozen=True, slots=True)
class Prompt:
    """One unique prompt: chat messages, and the plain text used for /completions."""

    messages: tuple[Mapping[str, Any], ...]

    @classmethod
    def from_text(cls, text: str) -> Prompt:
        return cls(messages=({"role": "user", "content": text},))

    def as_text(self) -> str:
        return "\n".join(str(message.get("content", "")) for message in self.messages)


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """What to send and in which order. ``prompts`` None means synthetic prompts."""

    prompts: tuple[Prompt, ...] | None = None
    num_unique: int | None = None
    repeat_ratio: float | None = None
    zipf_s: float | None = None
    seed: int = 0
    prompt_num_words: int = 32

    def __post_init__(self) -> None:
        if self.prompts is not None and not self.prompts:
            raise ValueError("the prompts file holds no prompts")
        if self.num_unique is not None and self.num_unique < 1:
            raise ValueError("num_unique must be at least 1")
        if self.repeat_ratio is not None and not 0.0 <= self.repeat_ratio <= 1.0:
            raise ValueError("repeat_ratio must be within [0, 1]")
        if self.zipf_s is not None and self.zipf_s <= 0.0:
            raise ValueError("zipf exponent must be positive")
        if self.repeat_ratio is not None and self.zipf_s is not None:
            raise ValueError("choose either a repeat ratio or a Zipf exponent, not both")
        if self.prompt_num_words < 1:
            raise ValueError("prompt_num_words must be at least 1")

    def population(self) -> int | None:
        """How many distinct prompts the run may use; None is unbounded (synthetic only)."""
        if self.prompts is not None:
            available = len(self.prompts)
            return min(available, self.num_unique) if self.num_unique else available
        if self.zipf_s is not None and self.num_unique is None:
            return DEFAULT_ZIPF_NUM_UNIQUE
        return self.num_unique

    def prompt_at(self, index: int) -> Prompt:
        if self.prompts is not None:
            return self.prompts[index]
        return Prompt.from_text(synthetic_text(self.seed, index, self.prompt_num_words))


def synthetic_text(seed: int, index: int, num_words: int) -> str:
    """A prompt unique to (seed, index): the tag guarantees it, the words give it body."""
    rng = random.Random(f"{seed}:{index}")
    words = " ".join(rng.choice(_WORDS) for _ in range(num_words))
    return f"[{seed}-{index}] Please summarize: {words}"


def prompt_indices(spec: WorkloadSpec) -> Iterator[int]:
    """The endless, seeded sequence of prompt indices requests use, in order."""
    population = spec.population()
    rng = random.Random(spec.seed)
    if spec.zipf_s is not None:
        assert population is not None  # population() always bounds Zipf
        return _zipf_indices(rng, population, spec.zipf_s)
    if spec.repeat_ratio is not None:
        return _repeat_indices(rng, population, spec.repeat_ratio)
    if population is None:
        return itertools.count()
    return itertools.cycle(range(population))


def _repeat_indices(
    rng: random.Random, population: int | None, repeat_ratio: float
) -> Iterator[int]:
    num_seen = 0
    while True:
        exhausted = population is not None and num_seen >= population
        if num_seen and (exhausted or rng.random() < repeat_ratio):
            yield rng.randrange(num_seen)
        else:
            yield num_seen
            num_seen += 1


def _zipf_indices(rng: random.Random, population: int, exponent: float) -> Iterator[int]:
    cumulative = list(
        itertools.accumulate(1.0 / rank**exponent for rank in range(1, population + 1))
    )
    total = cumulative[-1]
    while True:
        yield min(bisect.bisect_left(cumulative, rng.random() * total), population - 1)


def parse_prompts(text: str) -> tuple[Prompt, ...]:
    """Prompts from JSONL (``prompt`` or ``messages`` per line) or plain text, one per line.

    The format is decided per line: a line that parses as a JSON object is JSONL, anything
    else is a literal prompt, so a text file whose lines happen to start with ``{`` still works.
    """
    prompts: list[Prompt] = []
    for line_number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line:
            continue
        prompts.append(_parse_line(line, line_number))
    return tuple(prompts)


def _parse_line(line: str, line_number: int) -> Prompt:
    record: object = None
    if line.startswith("{"):
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            record = None
    if not isinstance(record, dict):
        return Prompt.from_text(line)
    if isinstance(record.get("prompt"), str):
        return Prompt.from_text(record["prompt"])
    messages = record.get("messages")
    if _is_messages(messages):
        return Prompt(messages=tuple(messages))
    raise ValueError(f"line {line_number}: a JSON line needs a 'prompt' string or 'messages' list")


def _is_messages(value: object) -> TypeGuard[list[Mapping[str, Any]]]:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(message, dict) and "role" in message for message in value)
    )


def load_prompts(path: Path) -> tuple[Prompt, ...]:
    return parse_prompts(path.read_text(encoding="utf-8"))
