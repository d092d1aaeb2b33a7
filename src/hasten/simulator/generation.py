"""What a chat/text completion request produces: how many tokens, which text, why it ended.

A choice answers with text or, when the request's tools are called, with tool calls whose
arguments (``{"text":"..."}``) are made of the generated words; with logprobs asked for,
every content token carries its (made-up, deterministic) log probability.
"""

from __future__ import annotations

from dataclasses import dataclass

from hasten.simulator.arguments import TEXT_FRAME, ArgumentFrame
from hasten.simulator.inputs import GenerationRequest
from hasten.simulator.textgen import (
    generate_pieces,
    seed_material,
    token_logprobs,
    tool_call_id,
    truncate_at_stop,
)

# Per token: its log probability, then (token, log probability) of the likeliest ones.
TokenLogprob = tuple[float, tuple[tuple[str, float], ...]]


@dataclass(frozen=True, slots=True)
class ToolCall:
    call_id: str
    name: str
    num_pieces: int  # how many of the choice's pieces are this call's arguments


@dataclass(frozen=True, slots=True)
class GeneratedChoice:
    pieces: list[str]  # one entry per completion token: the text, or every call's arguments
    finish_reason: str  # "stop", "length" or "tool_calls", as OpenAI reports it
    tool_calls: tuple[ToolCall, ...] = ()
    logprobs: list[TokenLogprob] | None = None  # one per piece, when asked for

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def call_pieces(self) -> list[list[str]]:
        """Each tool call's argument pieces, in order."""
        calls: list[list[str]] = []
        start = 0
        for call in self.tool_calls:
            calls.append(self.pieces[start : start + call.num_pieces])
            start += call.num_pieces
        return calls


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
        if request.tool_names:
            reason = "length" if hit_limit else "tool_calls"
            frames = request.argument_frames or (TEXT_FRAME,) * len(request.tool_names)
            calls = tuple(zip(request.tool_names, frames, strict=True))
            choices.append(_tool_choice(material, calls, num_tokens, reason))
            continue
        pieces, stopped = truncate_at_stop(generate_pieces(material, num_tokens), request.stops)
        if request.prefix:
            pieces = _after_prefix(pieces, request.prefix, material, num_tokens)
        logprobs = None
        if request.has_logprobs:
            logprobs = token_logprobs(material, pieces, request.num_top_logprobs)
        choices.append(GeneratedChoice(pieces, "stop" if stopped else length_reason, (), logprobs))
    return choices


def _after_prefix(pieces: list[str], prefix: str, material: bytes, num_tokens: int) -> list[str]:
    """What follows ``prefix``: the rest of this answer if it began so, else a fresh one."""
    if not "".join(pieces).startswith(prefix):
        return generate_pieces(material + b"\x00" + prefix.encode(), num_tokens)
    consumed = 0
    for position, piece in enumerate(pieces):
        if consumed + len(piece) > len(prefix):
            rest = piece[len(prefix) - consumed :]
            return [rest, *pieces[position + 1 :]]
        consumed += len(piece)
    return []


def _tool_choice(
    material: bytes,
    calls_made: tuple[tuple[str, ArgumentFrame], ...],
    num_tokens: int,
    finish_reason: str,
) -> GeneratedChoice:
    """One call per name, the tokens shared out between them (at least one each), each
    call's words inside its arguments' frame (one piece when its schema has no words)."""
    pieces: list[str] = []
    calls: list[ToolCall] = []
    num_calls = len(calls_made)
    for call_index, (name, frame) in enumerate(calls_made):
        share = num_tokens // num_calls + (call_index < num_tokens % num_calls)
        if frame.has_words:
            words = generate_pieces(material + b"\x00tool%d" % call_index, max(1, share))
            words[0] = frame.open + words[0]
            words[-1] += frame.close
        else:
            words = [frame.open + frame.close]
        pieces.extend(words)
        calls.append(ToolCall(tool_call_id(material, call_index), name, len(words)))
    return GeneratedChoice(pieces, finish_reason, tuple(calls))
