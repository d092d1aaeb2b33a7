"""What a chat/text completion request produces: how many tokens, which text, why it ended."""

from __future__ import annotations

from dataclasses import dataclass

from hasten.simulator.inputs import GenerationRequest
from hasten.simulator.textgen import generate_pieces, seed_material, truncate_at_stop


@dataclass(frozen=True, slots=True)
class GeneratedChoice:
    pieces: list[str]  # one entry per completion token; their concatenation is the text
    finish_reason: str  # "stop" or "length", as OpenAI reports it

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def target_num_tokens(
    default_tokens: int, max_tokens: int | None, forced_tokens: int | None
) -> tuple[int, bool]:
    """(length, whether max_tokens cut it). The `x-sim-tokens` header wins, then max_tokens
    (the model "runs to the limit"), then the configured default; max_tokens always caps."""
    if forced_tokens is not None:
        natural = forced_tokens
    elif max_tokens is not None:
        natural = max_tokens
    else:
        natural = default_tokens
    if max_tokens is not None and natural >= max_tokens:
        return max_tokens, True
    return natural, False


def generate_choices(
    request: GenerationRequest, default_tokens: int, forced_tokens: int | None
) -> list[GeneratedChoice]:
    num_tokens, hit_limit = target_num_tokens(default_tokens, request.max_tokens, forced_tokens)
    length_reason = "length" if hit_limit else "stop"
    choices: list[GeneratedChoice] = []
    for index in range(request.num_choices):
        material = seed_material(request.model, request.prompt_json, request.seed, index)
        pieces, stopped = truncate_at_stop(generate_pieces(material, num_tokens), request.stops)
        choices.append(GeneratedChoice(pieces, "stop" if stopped else length_reason))
    return choices
