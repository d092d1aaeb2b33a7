"""Per-request token sampling on a logits row: greedy, temperature and nucleus (top_p).

Pure numpy so it is unit-tested without llama.cpp. Each request owns its own seeded
generator, so a request's output depends on its seed alone, never on which other
requests happen to share its decode steps.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

Logits = npt.NDArray[np.float32]

# Nucleus sampling first looks at this many best tokens: sorting 49k logits per token
# costs milliseconds, while the nucleus almost always lies within the top few hundred.
_TOP_CANDIDATES = 256
_GREEDY_TEMPERATURE = 1e-5


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """What a request asked for; validated by the caller (the HTTP layer)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None


@dataclass(slots=True)
class TokenSampler:
    """Draws the next token for one request from its logits row."""

    temperature: float
    top_p: float
    rng: np.random.Generator = field(repr=False)

    @classmethod
    def from_params(cls, params: SamplingParams) -> TokenSampler:
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        return cls(params.temperature, params.top_p, np.random.default_rng(seed))

    def sample(self, logits: Logits) -> int:
        if self.temperature <= _GREEDY_TEMPERATURE:
            return int(np.argmax(logits))
        scaled = logits.astype(np.float64) / self.temperature
        if self.top_p >= 1.0:
            return self._draw(np.arange(scaled.size), scaled)
        candidates = _nucleus(scaled, self.top_p)
        return self._draw(candidates, scaled[candidates])

    def _draw(self, token_ids: npt.NDArray[np.intp], scaled: npt.NDArray[np.float64]) -> int:
        weights = np.exp(scaled - scaled.max())
        cumulative = np.cumsum(weights)
        threshold = self.rng.random() * cumulative[-1]
        index = int(np.searchsorted(cumulative, threshold, side="right"))
        return int(token_ids[min(index, token_ids.size - 1)])


def _nucleus(scaled: npt.NDArray[np.float64], top_p: float) -> npt.NDArray[np.intp]:
    """Smallest set of best tokens whose probability mass reaches ``top_p``, best first."""
    weights = np.exp(scaled - scaled.max())
    total = weights.sum()
    num_candidates = min(_TOP_CANDIDATES, scaled.size)
    if num_candidates < scaled.size:
        top = np.argpartition(-scaled, num_candidates - 1)[:num_candidates]
        # The partial set is enough only when it already holds the requested mass.
        if weights[top].sum() < top_p * total:
            top = np.arange(scaled.size)
    else:
        top = np.arange(scaled.size)
    order = top[np.argsort(-scaled[top], kind="stable")]
    cumulative = np.cumsum(weights[order])
    num_kept = int(np.searchsorted(cumulative, top_p * total, side="left")) + 1
    return order[: min(num_kept, order.size)]
