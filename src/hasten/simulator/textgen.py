"""Deterministic text: prompt "tokens", generated completions and pseudo-embeddings.

A token is a whitespace-separated word. Completions pick words from a small built-in
vocabulary, driven by BLAKE2b of (model, prompt, seed, choice index): the same request always
yields the same text and different prompts yield different text, at a few microseconds a call.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from hashlib import blake2b

_VOCABULARY = (
    "the of and to in is that for it as with was on be at by this had not are but from or have "
    "an they which one you were her all she there would their we him been has when who will "
    "more no if out so said what up its about into than them can only other new some could time "
    "these two may then do first any my now such like our over man me even most made after also "
    "did many before must through back years where much your way well down should because each "
    "just those people how too little state good very make world still own see men work long "
    "get here between both life being under never day same another know while last might us "
    "great old year off come since against go came right used take three small large fast slow "
    "light dark river stone cloud signal vector engine packet stream cache token model window "
    "garden silver amber harbor meadow lantern compass orbit quartz velvet ember glacier canyon "
    "falcon willow cedar maple copper cobalt crimson indigo saffron tundra prairie delta summit "
    "valley island forest desert ocean thunder breeze ripple echo pulse spark drift anchor beacon "
    "bridge castle tower market letter number answer question reason method system process "
    "result future moment memory pattern balance center circle corner detail effort energy "
    "figure finish friend ground health history image level matter nature order paper period "
    "picture player record region report season second secret series source space spirit "
    "structure subject surface theory travel value voice water weather wonder yellow"
)
_WORDS = _VOCABULARY.split()
_FIRST_PIECES = tuple(_WORDS)
# Later tokens carry their leading space, as real tokenizers' pieces do.
_NEXT_PIECES = tuple(" " + word for word in _WORDS)
_NUM_WORDS = len(_WORDS)
_DIGEST_BYTES = 64


def text_tokens(text: str) -> list[str]:
    return text.split()


def _content_tokens(content: object) -> list[str]:
    if isinstance(content, str):
        return content.split()
    tokens: list[str] = []
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                tokens.extend(part["text"].split())
    return tokens


def chat_prompt_tokens(messages: Sequence[object]) -> list[str]:
    """Words of every message, each message led by a role marker so structure matters."""
    tokens: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        tokens.append(f"<|{message.get('role', '')}|>")
        tokens.extend(_content_tokens(message.get("content")))
    return tokens


def completion_prompt_tokens(prompt: object) -> list[str]:
    """A prompt as a string, a list of strings, token ids, or a list of token-id lists."""
    if isinstance(prompt, str):
        return prompt.split()
    tokens: list[str] = []
    if isinstance(prompt, list):
        for item in prompt:
            if isinstance(item, str):
                tokens.extend(item.split())
            elif isinstance(item, int):
                tokens.append(str(item))
            elif isinstance(item, list):
                tokens.extend(str(token_id) for token_id in item)
    return tokens


def _digest_stream(seed_material: bytes, num_bytes: int) -> bytes:
    """`num_bytes` pseudo-random bytes: BLAKE2b of the material, extended by a counter."""
    base = blake2b(seed_material, digest_size=_DIGEST_BYTES)
    if num_bytes <= _DIGEST_BYTES:
        return base.digest()
    blocks: list[bytes] = []
    for counter in range((num_bytes + _DIGEST_BYTES - 1) // _DIGEST_BYTES):
        block = base.copy()
        block.update(counter.to_bytes(8, "little"))
        blocks.append(block.digest())
    return b"".join(blocks)


def generate_pieces(seed_material: bytes, num_tokens: int) -> list[str]:
    """`num_tokens` text pieces whose concatenation is the completion."""
    if num_tokens <= 0:
        return []
    stream = _digest_stream(seed_material, num_tokens)
    pieces = [_NEXT_PIECES[byte % _NUM_WORDS] for byte in stream[:num_tokens]]
    pieces[0] = _FIRST_PIECES[stream[0] % _NUM_WORDS]
    return pieces


def seed_material(model: str, prompt_json: bytes, seed: int | None, choice_index: int) -> bytes:
    seed_text = "" if seed is None else str(seed)
    return b"\x00".join(
        (model.encode(), prompt_json, seed_text.encode(), str(choice_index).encode())
    )


def truncate_at_stop(pieces: list[str], stops: Sequence[str]) -> tuple[list[str], bool]:
    """Cuts the text before the earliest stop sequence; returns (pieces, whether it stopped)."""
    if not stops or not pieces:
        return pieces, False
    text = "".join(pieces)
    cut = min((index for stop in stops if (index := text.find(stop)) >= 0), default=-1)
    if cut < 0:
        return pieces, False
    kept: list[str] = []
    num_chars = 0
    for piece in pieces:
        if num_chars + len(piece) >= cut:
            tail = piece[: cut - num_chars]
            if tail:
                kept.append(tail)
            break
        kept.append(piece)
        num_chars += len(piece)
    return kept, True


def embedding_vector(model: str, text: str, num_dims: int) -> list[float]:
    """A unit-length vector derived from a hash of (model, text)."""
    stream = _digest_stream(model.encode() + b"\x00" + text.encode(), num_dims)
    raw = [(byte - 127.5) / 127.5 for byte in stream[:num_dims]]
    norm = math.sqrt(sum(value * value for value in raw))
    return [value / norm for value in raw]


def token_logprobs(
    seed_material: bytes, pieces: Sequence[str], num_top: int
) -> list[tuple[float, tuple[tuple[str, float], ...]]]:
    """Per piece, its log probability and the ``num_top`` likeliest tokens at that step
    (the piece itself first): made up, but the same for the same request."""
    if not pieces:
        return []
    stream = _digest_stream(seed_material + b"\x00logprobs", len(pieces))
    entries: list[tuple[float, tuple[tuple[str, float], ...]]] = []
    for piece, byte in zip(pieces, stream, strict=False):
        logprob = -round(byte / 255.0 * 2.0, 6)
        top = [(piece, logprob)]
        for rank in range(1, num_top):
            word = _NEXT_PIECES[(byte + 31 * rank) % _NUM_WORDS]
            top.append((word, round(logprob - 1.5 * rank, 6)))
        entries.append((logprob, tuple(top[:num_top])))
    return entries


def tool_call_id(seed_material: bytes, call_index: int) -> str:
    """``call_`` and 24 characters, as OpenAI's ids look."""
    digest = blake2b(seed_material + b"\x00call%d" % call_index, digest_size=12)
    return "call_" + digest.hexdigest()
