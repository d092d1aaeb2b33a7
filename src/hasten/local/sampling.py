"""Per-request token sampling on logits rows: greedy, temperature and nucleus (top_p).

Pure numpy so it is unit-tested without llama.cpp. Each request owns its own seeded
generator, so a request's output depends on its seed alone, never on which other
requests happen to share its decode steps. ``sample_rows`` draws a whole decode step's
tokens with one numpy call per stage rather than one per request: per-token Python and
numpy work holds the GIL and runs between two decodes, so it is paid once per step.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

Logits = npt.NDArray[np.float32]

# Nucleus sampling first looks at this many best tokens: sorting 49k logits per token
# costs milliseconds, while the nucleus almost always lies within the top few hundred.
_TOP_CANDIDATES = 256
_GREEDY_TEMPERATURE = 1e-5
# Inverse-CDF search in two levels (block sums, then one block's cumsum): a float64
# cumsum over a whole 49k vocabulary costs ~0.2 ms per row, the blocks a few microseconds.
_BLOCK_TOKENS = 256


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

    @property
    def is_greedy(self) -> bool:
        return self.temperature <= _GREEDY_TEMPERATURE

    def sample(self, logits: Logits) -> int:
        return sample_rows(logits.reshape(1, -1), [self])[0]

    def sample_nucleus(self, logits: Logits) -> int:
        scaled = logits.astype(np.float64) / self.temperature
        candidates = _nucleus(scaled, self.top_p)
        weights = np.exp(scaled[candidates] - scaled[candidates].max())
        cumulative = np.cumsum(weights)
        threshold = self.rng.random() * cumulative[-1]
        index = int(np.searchsorted(cumulative, threshold, side="right"))
        return int(candidates[min(index, candidates.size - 1)])


def sample_rows(logits: npt.NDArray[np.float32], samplers: Sequence[TokenSampler]) -> list[int]:
    """Token for row ``i`` of ``logits`` (rows × vocabulary) drawn by ``samplers[i]``."""
    tokens = [0] * len(samplers)
    greedy = [i for i, sampler in enumerate(samplers) if sampler.is_greedy]
    if greedy:
        for i, token in zip(greedy, np.argmax(logits[greedy], axis=1).tolist(), strict=True):
            tokens[i] = int(token)
    full = [i for i, s in enumerate(samplers) if not s.is_greedy and s.top_p >= 1.0]
    if full:
        temperatures = np.array([samplers[i].temperature for i in full], dtype=np.float32)
        scaled = logits[full] / temperatures[:, None]
        weights = np.exp(scaled - scaled.max(axis=1, keepdims=True))
        uniforms = [samplers[i].rng.random() for i in full]
        for i, token in zip(full, _inverse_cdf(weights, uniforms), strict=True):
            tokens[i] = token
    for i, sampler in enumerate(samplers):
        if not sampler.is_greedy and sampler.top_p < 1.0:
            tokens[i] = sampler.sample_nucleus(logits[i])
    return tokens


def _inverse_cdf(weights: npt.NDArray[np.float32], uniforms: list[float]) -> list[int]:
    """Per row, the token where the cumulative weight first exceeds ``u`` × the total."""
    num_rows, num_vocab = weights.shape
    num_blocks = -(-num_vocab // _BLOCK_TOKENS)
    padded = weights
    if num_blocks * _BLOCK_TOKENS != num_vocab:
        padded = np.zeros((num_rows, num_blocks * _BLOCK_TOKENS), dtype=weights.dtype)
        padded[:, :num_vocab] = weights
    blocks = padded.reshape(num_rows, num_blocks, _BLOCK_TOKENS)
    block_cumulative = np.cumsum(blocks.sum(axis=2, dtype=np.float64), axis=1)
    tokens: list[int] = []
    for row, uniform in enumerate(uniforms):
        threshold = uniform * block_cumulative[row, -1]
        block = min(
            int(np.searchsorted(block_cumulative[row], threshold, side="right")), num_blocks - 1
        )
        before = block_cumulative[row, block - 1] if block > 0 else 0.0
        inner = np.cumsum(blocks[row, block], dtype=np.float64) + before
        offset = min(int(np.searchsorted(inner, threshold, side="right")), _BLOCK_TOKENS - 1)
        tokens.append(min(block * _BLOCK_TOKENS + offset, num_vocab - 1))
    return tokens


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
