"""The Responses and Messages APIs in the simulator, built on its chat generation.

A request is checked as the real API checks it (``hasten.apis``), then reduced to the chat
request the word generator runs on: function tools and text, image and tool turns (built-in
tools, documents and other items are the real provider's business and are left out of
the generation, not refused), with the length capped by ``max_output_tokens`` or
``max_tokens`` instead of run to it, since agents set large limits. A Messages request
ending with an assistant turn is continued from it (Anthropic's prefill).

Its prompt is tokenised (words, role markers, tools' JSON pieces, tools first) for the
provider prefix cache its API has: the Responses API caches like chat, automatically, every
full block of the prompt (``PrefixCache``); the Messages API caches only up to its
``cache_control`` breakpoints and reads back at block boundaries (``BreakpointCache``).

Its stream is the chat stream the simulator would send, each chunk fed through
``hasten.apis``' translators: the same latency plan, token by token, on the official event
sequence, with the API's own terminal and error events (``NativeStream``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from hashlib import blake2b
from typing import Any

import orjson

from hasten.apis import messages, responses
from hasten.apis.fields import translating
from hasten.apis.messages_chat import (
    ChatToMessagesStream,
    chat_body_to_messages,
    messages_request_to_chat,
)
from hasten.apis.responses_chat import (
    ChatToResponsesStream,
    chat_body_to_responses,
    responses_request_to_chat,
)
from hasten.apis.usage import Usage
from hasten.simulator.execution import SIMULATED_500_MESSAGE, StreamWire
from hasten.simulator.generation import GeneratedChoice
from hasten.simulator.inputs import MAX_COMPLETION_TOKENS, GenerationRequest, parse_chat_request
from hasten.simulator.streaming import ScheduledEvent
from hasten.simulator.textgen import generate_pieces, seed_material

RESPONSES = "responses"
MESSAGES = "messages"
_JSON_PIECES = re.compile(r"\w+|[^\w\s]")
_RESPONSES_GENERATION_FIELDS = (
    "model",
    "instructions",
    "stream",
    "max_output_tokens",
    "parallel_tool_calls",
    "temperature",
    "top_p",
)
_MESSAGES_GENERATION_FIELDS = ("model", "system", "stream", "max_tokens", "temperature", "top_p")
_GENERATION_ITEMS = frozenset({"message", "function_call", "function_call_output"})
_GENERATION_PARTS = frozenset({"input_text", "output_text", "refusal"})
_GENERATION_BLOCKS = frozenset({"text", "tool_use", "tool_result"})
_IGNORED_ITEM_FIELDS = ("id", "status")
# Items only a model writes (besides an assistant message).
_OUTPUT_ITEMS = frozenset({"function_call", "reasoning"})


@dataclass(frozen=True, slots=True)
class NativeRequest:
    """A Responses or Messages request, as the simulator needs it."""

    api: str
    body: dict[str, Any]
    generation: GenerationRequest
    prompt_tokens: list[str]
    # Messages: where content blocks end, and which of those ends carry cache_control.
    boundaries: tuple[int, ...] = ()
    breakpoints: tuple[int, ...] = ()
    # Responses: the conversation's whole input (history included), kept with the answer.
    input_items: tuple[Any, ...] = ()

    @property
    def cache_namespace(self) -> str:
        return f"{self.api}\x00{self.generation.model}"


# --- tokens -----------------------------------------------------------------------------


def json_tokens(value: Any) -> list[str]:
    """A JSON value as the pieces a tokenizer would see: words and punctuation."""
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return _JSON_PIECES.findall(text)


def _image_token(source: Any) -> str:
    return "<image:" + blake2b(orjson.dumps(source), digest_size=6).hexdigest() + ">"


def _content_words(content: Any) -> list[str]:
    """Words of a string or of content parts' text; one token per image."""
    if isinstance(content, str):
        return content.split()
    words: list[str] = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind in ("input_image", "image"):
            words.append(_image_token(part.get("image_url") or part.get("source")))
        for name in ("text", "refusal", "thinking"):
            if isinstance(part.get(name), str):
                words.extend(part[name].split())
    return words


def _tool_tokens(tool: Mapping[str, Any]) -> list[str]:
    described = {key: value for key, value in tool.items() if key != "cache_control"}
    return ["<|tool|>", *json_tokens(described)]


def responses_prompt_tokens(instructions: Any, tools: Any, items: Iterable[Any]) -> list[str]:
    """A Responses prompt's tokens: tools, instructions, then every input item."""
    tokens: list[str] = []
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, Mapping):
            tokens.extend(_tool_tokens(tool))
    if isinstance(instructions, str):
        tokens.append("<|system|>")
        tokens.extend(instructions.split())
    for item in items:
        if isinstance(item, Mapping):
            tokens.extend(_item_tokens(item))
    return tokens


def _item_tokens(item: Mapping[str, Any]) -> list[str]:
    kind = item.get("type") or ("message" if "role" in item else "item")
    if kind == "message":
        return [f"<|{item.get('role', '')}|>", *_content_words(item.get("content"))]
    if kind == "function_call":
        return ["<|call|>", str(item.get("name", "")), *json_tokens(str(item.get("arguments", "")))]
    if kind == "function_call_output":
        return ["<|tool|>", *_content_words(item.get("output"))]
    described = {key: value for key, value in item.items() if key not in _IGNORED_ITEM_FIELDS}
    return [f"<|{kind}|>", *json_tokens(described)]


@dataclass(frozen=True, slots=True)
class MessagesPrompt:
    tokens: list[str]
    boundaries: tuple[int, ...]
    breakpoints: tuple[int, ...]


def messages_prompt(body: Mapping[str, Any]) -> MessagesPrompt:
    """A Messages prompt's tokens in Anthropic's cache order (tools, system, messages), where
    its content blocks end, and where ``cache_control`` marks one (the top-level marker: the
    last block)."""
    tokens: list[str] = []
    boundaries: list[int] = []
    breakpoints: list[int] = []

    def block_end(block: Any) -> None:
        boundaries.append(len(tokens))
        if isinstance(block, Mapping) and block.get("cache_control") is not None:
            breakpoints.append(len(tokens))

    for tool in body.get("tools") or ():
        tokens.extend(_tool_tokens(tool))
        block_end(tool)
    system = body.get("system")
    if isinstance(system, str):
        tokens.extend(["<|system|>", *system.split()])
        block_end(None)
    elif isinstance(system, list):
        tokens.append("<|system|>")
        for block in system:
            tokens.extend(_content_words([block]))
            block_end(block)
    for message in body.get("messages") or ():
        tokens.append(f"<|{message.get('role', '')}|>")
        content = message.get("content")
        if isinstance(content, str):
            tokens.extend(content.split())
            block_end(None)
            continue
        for block in content or ():
            if block.get("type") == "tool_result":
                tokens.append("<|tool|>")
                inner = block.get("content")
                if isinstance(inner, list):
                    for inner_block in inner:
                        tokens.extend(_content_words([inner_block]))
                        block_end(inner_block)
                else:
                    tokens.extend(_content_words(inner))
            elif block.get("type") == "tool_use":
                tokens.extend(
                    ["<|call|>", str(block.get("name")), *json_tokens(block.get("input"))]
                )
            elif block.get("type") in ("text", "image", "thinking"):
                tokens.extend(_content_words([block]))
            else:
                tokens.extend(json_tokens(block))
            block_end(block)
    if body.get("cache_control") is not None and tokens:
        breakpoints.append(len(tokens))
    return MessagesPrompt(tokens, tuple(boundaries), tuple(breakpoints))


# --- requests ---------------------------------------------------------------------------


def as_items(value: Any) -> list[Any]:
    """A Responses ``input`` as items (a string is one user message)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


def parse_responses(body: dict[str, Any], history: list[Any]) -> NativeRequest:
    """A checked Responses request, continued from ``history`` (a stored response's input
    and output when it names a ``previous_response_id``); an odd shape the check let
    through is a 400."""
    with translating("input"):
        return _parse_responses(body, history)


def _parse_responses(body: dict[str, Any], history: list[Any]) -> NativeRequest:
    items = [*history, *as_items(body.get("input"))]
    generation_body = {
        name: body[name] for name in _RESPONSES_GENERATION_FIELDS if body.get(name) is not None
    }
    generation_body["input"] = [
        _generation_item(item) for item in items if _item_kind(item) in _GENERATION_ITEMS
    ]
    tools = [tool for tool in body.get("tools") or () if tool.get("type") == "function"]
    if tools:
        generation_body["tools"] = tools
        choice = body.get("tool_choice")
        if isinstance(choice, str) or (
            isinstance(choice, Mapping) and choice.get("type") == "function"
        ):
            generation_body["tool_choice"] = choice
    chat = responses_request_to_chat(generation_body)
    generation = _generation(chat, "max_tokens")
    tokens = responses_prompt_tokens(body.get("instructions"), body.get("tools"), items)
    return NativeRequest(RESPONSES, body, generation, tokens, input_items=tuple(items))


def resends_history(body: Mapping[str, Any]) -> bool:
    """Whether a Responses request's ``input`` holds output of an earlier answer (an
    assistant message, a function call, reasoning): a conversation sent whole."""
    items = body.get("input")
    if not isinstance(items, list):
        return False
    return any(
        _item_kind(item) in _OUTPUT_ITEMS
        or (_item_kind(item) == "message" and item.get("role") == "assistant")
        for item in items
    )


def _item_kind(item: Any) -> str | None:
    if not isinstance(item, Mapping):
        return None
    kind = item.get("type") or ("message" if "role" in item else None)
    return kind if isinstance(kind, str) else None


def _generation_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """An item with only the parts the generator reads."""
    kept = {key: value for key, value in item.items() if key not in _IGNORED_ITEM_FIELDS}
    if _item_kind(item) == "message" and isinstance(item.get("content"), list):
        kept["content"] = [
            part
            for part in item["content"]
            if part.get("type") in _GENERATION_PARTS
            or (part.get("type") == "input_image" and isinstance(part.get("image_url"), str))
        ]
    if _item_kind(item) == "function_call_output" and isinstance(item.get("output"), list):
        kept["output"] = [part for part in item["output"] if part.get("type") == "input_text"]
    return kept


def parse_messages(body: dict[str, Any]) -> NativeRequest:
    """A checked Messages request; an odd shape the check let through is a 400."""
    with translating("messages"):
        return _parse_messages(body)


def _parse_messages(body: dict[str, Any]) -> NativeRequest:
    generation_body = {
        name: body[name] for name in _MESSAGES_GENERATION_FIELDS if body.get(name) is not None
    }
    generation_body["messages"] = [_generation_message(message) for message in body["messages"]]
    tools = [tool for tool in body.get("tools") or () if tool.get("type") in (None, "custom")]
    if tools:
        generation_body["tools"] = tools
        if body.get("tool_choice") is not None:
            generation_body["tool_choice"] = body["tool_choice"]
    chat = messages_request_to_chat(generation_body)
    last = chat["messages"][-1] if chat["messages"] else None
    if last is not None and last["role"] == "assistant" and not last.get("tool_calls"):
        # A prefilled answer: the generator continues from it.
        content = last.get("content")
        if isinstance(content, list):
            last["content"] = "".join(part.get("text", "") for part in content)
        chat["continue_final_message"] = True
    generation = _generation(chat, "max_tokens")
    stops = tuple(stop for stop in body.get("stop_sequences") or () if stop)
    generation = replace(generation, stops=stops)
    prompt = messages_prompt(body)
    return NativeRequest(
        MESSAGES, body, generation, prompt.tokens, prompt.boundaries, prompt.breakpoints
    )


def _generation_message(message: Mapping[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if not isinstance(content, list):
        return dict(message)
    blocks: list[Any] = []
    for block in content:
        kind = block.get("type")
        if kind == "image" and block.get("source", {}).get("type") in ("base64", "url"):
            blocks.append(block)
        elif kind == "tool_result" and isinstance(block.get("content"), list):
            text_only = [inner for inner in block["content"] if inner.get("type") == "text"]
            blocks.append({**block, "content": text_only})
        elif kind in _GENERATION_BLOCKS:
            blocks.append(block)
    return {**message, "content": blocks}


def _generation(chat: dict[str, Any], limit_field: str) -> GenerationRequest:
    """The chat view parsed as a chat request: the limit clamped to what the simulator
    generates at most (it caps, it is not run to), usage always reported."""
    limit = chat.get(limit_field)
    if isinstance(limit, int) and limit > MAX_COMPLETION_TOKENS:
        chat[limit_field] = MAX_COMPLETION_TOKENS
    chat.pop("stop", None)
    if not chat["messages"]:
        chat["messages"] = [{"role": "user", "content": ""}]
    request = parse_chat_request(chat)
    return replace(request, include_usage=True)


def matched_stop(request: GenerationRequest, num_tokens: int) -> str | None:
    """The stop sequence that cut the answer short (the earliest in its text), if any."""
    if not request.stops or request.tool_names:
        return None
    material = seed_material(request.model, request.prompt_json, request.seed, 0)
    text = "".join(generate_pieces(material, num_tokens))
    found = [(text.find(stop), stop) for stop in request.stops if stop in text]
    return min(found)[1] if found else None


# --- answers ----------------------------------------------------------------------------


def chat_usage(num_prompt: int, num_completion: int, read: int, written: int) -> dict[str, Any]:
    """The chat usage the translators read: cached (read) and cache-written tokens."""
    details: dict[str, Any] = {"cached_tokens": read}
    if written:
        details["cache_write_tokens"] = written
    return {
        "prompt_tokens": num_prompt,
        "completion_tokens": num_completion,
        "total_tokens": num_prompt + num_completion,
        "prompt_tokens_details": details,
    }


class NativeStream:
    """One Responses or Messages stream: the chat schedule translated event by event.

    ``schedule`` yields the API's events (one SSE event each, so fault positions count
    them), the opening ones due after one network round trip; ``wire`` says how the stream
    ends and fails. A Responses stream that reaches its terminal event calls
    ``on_complete`` with the whole response (to store it) before that event goes out.
    """

    def __init__(
        self,
        native: NativeRequest,
        *,
        response_id: str,
        created_at: int,
        stop_sequence: str | None = None,
        usage: Usage | None = None,
        on_complete: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.native = native
        self.stop_sequence = stop_sequence
        self._on_complete = on_complete
        self._events: list[dict[str, Any]] = []
        model = native.generation.model
        self._translator: ChatToResponsesStream | ChatToMessagesStream
        if native.api == RESPONSES:
            self._translator = ChatToResponsesStream(
                native.body, response_id=response_id, created_at=created_at, model=model
            )
            self._frame = responses.frame
            malformed = (
                b"event: response.output_text.delta\n"
                b'data: {"type": "response.output_text.delta", "delta": "con\n\n'
            )
        else:
            start_usage = None if usage is None else replace(usage, output_tokens=1)
            self._translator = ChatToMessagesStream(
                message_id=response_id, model=model, input_usage=start_usage
            )
            self._frame = messages.frame
            malformed = (
                b"event: content_block_delta\n"
                b'data: {"type": "content_block_delta", "index": 0, "delta": {"type": "te\n\n'
            )
        self.wire = StreamWire(b"", malformed, self._error_event)

    def schedule(
        self, chat_events: Iterable[ScheduledEvent], opening_due_ms: float
    ) -> Iterator[ScheduledEvent]:
        for event in self._translator.start():
            yield self._scheduled(opening_due_ms, event, 0)
        end_ms = opening_due_ms
        num_pending = 0  # tokens of chunks that made no event yet: counted with the next
        for due_ms, data, num_tokens in chat_events:
            end_ms = due_ms
            chunk = orjson.loads(data[len(b"data: ") :])
            if self.stop_sequence is not None:
                for choice in chunk.get("choices") or ():
                    if choice.get("finish_reason") == "stop":
                        choice["stop_reason"] = self.stop_sequence  # as vLLM names it
            num_pending += num_tokens
            events = self._translator.feed(chunk)
            for position, event in enumerate(events):
                is_last = position == len(events) - 1
                yield self._scheduled(due_ms, event, num_pending if is_last else 0)
            if events:
                num_pending = 0
        events = self._translator.finish()
        for position, event in enumerate(events):
            if event.get("type") in responses.COMPLETE_EVENTS and self._on_complete is not None:
                self._on_complete(event["response"])
            is_last = position == len(events) - 1
            yield self._scheduled(end_ms, event, num_pending if is_last else 0)

    def _scheduled(self, due_ms: float, event: dict[str, Any], num_tokens: int) -> ScheduledEvent:
        self._events.append(event)
        return due_ms, self._frame(event), num_tokens

    def _error_event(self, num_events_sent: int) -> bytes:
        """The API's mid-stream failure after ``num_events_sent`` events: Responses'
        ``response.failed`` (the output as the client has it), Messages' ``error``."""
        if self.native.api == MESSAGES:
            return messages.frame(messages.error_event(SIMULATED_500_MESSAGE, "api_error"))
        merge = responses.StreamMerge()
        for event in self._events[:num_events_sent]:
            merge.add(event)
        failed = responses.failed_event(
            SIMULATED_500_MESSAGE,
            "server_error",
            response=merge.snapshot(),
            sequence_number=num_events_sent,
        )
        return responses.frame(failed)


def whole_body(
    native: NativeRequest,
    chat_body: bytes,
    *,
    response_id: str,
    created_at: int,
    stop_sequence: str | None,
) -> dict[str, Any]:
    """The non-stream answer: the chat body the simulator would send, translated."""
    chat = orjson.loads(chat_body)
    if native.api == RESPONSES:
        return chat_body_to_responses(
            chat, native.body, response_id=response_id, created_at=created_at
        )
    if stop_sequence is not None and chat["choices"][0]["finish_reason"] == "stop":
        chat["choices"][0]["stop_reason"] = stop_sequence
    return chat_body_to_messages(chat, message_id=response_id)


def num_opening_events(api: str, choice: GeneratedChoice) -> int:
    """Events before the first token: the default place a mid-stream fault counts from."""
    if api == MESSAGES:
        return 3  # message_start, ping, content_block_start
    return 4 if not choice.tool_calls else 3  # created, in_progress, item added (+ part)
