"""One coding-agent task as the agents send it, on each client API: the growing history.

Each turn resends the whole conversation so far (system prompt, tools, the task, every tool
call and its result), as Codex (Responses, ``store: false``) and Claude Code (Messages) do;
the model's answer is read from its stream and appended, with a made-up tool result, for
the next turn. A task is fixed by its seed: the same seed sends the same requests, provided
the answers are the same (the simulator's are: its text is a hash of the prompt).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

API_NAMES = ("chat", "responses", "messages")
ANTHROPIC_VERSION = "2023-06-01"
API_KEY = "sk-agent-bench"
MAX_TOKENS = 4096  # agents ask for large limits; the simulator's own length rules

SYSTEM_PROMPT = " ".join(
    [
        "You are a coding agent working in a git repository on the user's machine.",
        "Read files before you change them, run the tests after every change, and keep",
        "each change small. Use the tools to list, read, search and edit files and to run",
        "shell commands; never guess a file's content. Answer with a tool call until the",
        "task is done, then say in one sentence what you changed.",
    ]
    * 6  # agents' system prompts run to thousands of characters
)

TOOLS: tuple[dict[str, Any], ...] = (
    {
        "name": "shell",
        "description": "Run a shell command in the repository and return its output.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "timeout_s": {"type": "number"}},
            "required": ["command"],
        },
    },
    {
        "name": "read_file",
        "description": "Read a file of the repository, optionally a range of lines.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "offset": {"type": "integer"}},
            "required": ["path"],
        },
    },
    {
        "name": "apply_patch",
        "description": "Apply a unified diff to the repository.",
        "parameters": {
            "type": "object",
            "properties": {"patch": {"type": "string"}},
            "required": ["patch"],
        },
    },
)


def task_text(seed: int) -> str:
    return (
        f"Task {seed}: the test tests/test_parser.py::test_case_{seed} fails;"
        " find out why and fix it."
    )


def tool_result(seed: int, turn: int) -> str:
    """What the tool printed: a few hundred characters, fixed by (task, turn)."""
    lines = [
        f"src/module_{(seed * 31 + turn * 7 + i) % 97}.py: {i * 13 + turn} lines" for i in range(8)
    ]
    return f"$ exit code 0 (turn {turn})\n" + "\n".join(lines)


@dataclass(slots=True)
class Turn:
    """What one request cost and how it was served."""

    ttft_ms: float | None  # to the first output token (text or tool-call arguments)
    e2e_ms: float  # to the end of the stream
    cache: str  # x-hasten-cache (empty: not through hasten)
    hedge: str  # x-hasten-hedge
    status: int
    request_bytes: int


@dataclass(slots=True)
class Answer:
    """The model's answer as the next turn sends it back."""

    text: str = ""
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (call id, name, arguments)


class Dialect(Protocol):
    """One client API: how a turn's request is built and its stream read."""

    path: str

    def headers(self) -> dict[str, str]: ...

    def body(self, model: str, seed: int, history: list[Any]) -> dict[str, Any]: ...

    def first_turn(self, seed: int) -> list[Any]: ...

    def append(self, history: list[Any], answer: Answer, seed: int, turn: int) -> None: ...

    def is_output(self, event_type: str, data: dict[str, Any]) -> bool: ...

    def read(self, events: list[tuple[str, dict[str, Any]]]) -> Answer: ...


class ResponsesDialect:
    path = "/v1/responses"

    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {API_KEY}"}

    def body(self, model: str, seed: int, history: list[Any]) -> dict[str, Any]:
        return {
            "model": model,
            "instructions": SYSTEM_PROMPT,
            "input": history,
            "tools": [{"type": "function", **tool} for tool in TOOLS],
            "tool_choice": "required",  # a tool call every turn, as in a long task
            "parallel_tool_calls": False,
            "store": False,  # Codex: no server-side state, the whole history every turn
            "stream": True,
            "max_output_tokens": MAX_TOKENS,
        }

    def first_turn(self, seed: int) -> list[Any]:
        return [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": task_text(seed)}],
            }
        ]

    def append(self, history: list[Any], answer: Answer, seed: int, turn: int) -> None:
        if answer.text:
            history.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": answer.text}],
                }
            )
        for call_id, name, arguments in answer.calls:
            history.append(
                {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}
            )
            history.append(
                {
                    "type": "function_call_output",
                    "call_id": call_id,
                    "output": tool_result(seed, turn),
                }
            )
        if not answer.calls:
            history.append(
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "Go on."}],
                }
            )

    def is_output(self, event_type: str, data: dict[str, Any]) -> bool:
        return event_type in (
            "response.output_text.delta",
            "response.function_call_arguments.delta",
        )

    def read(self, events: list[tuple[str, dict[str, Any]]]) -> Answer:
        answer = Answer()
        for event_type, data in events:
            if event_type not in ("response.completed", "response.incomplete"):
                continue
            for item in data["response"]["output"]:
                if item.get("type") == "function_call":
                    answer.calls.append((item["call_id"], item["name"], item["arguments"]))
                elif item.get("type") == "message":
                    answer.text += "".join(part.get("text", "") for part in item.get("content", ()))
        return answer


class MessagesDialect:
    path = "/v1/messages"

    def headers(self) -> dict[str, str]:
        return {"x-api-key": API_KEY, "anthropic-version": ANTHROPIC_VERSION}

    def body(self, model: str, seed: int, history: list[Any]) -> dict[str, Any]:
        return {
            "model": model,
            "max_tokens": MAX_TOKENS,
            "system": [{"type": "text", "text": SYSTEM_PROMPT}],
            "tools": [
                {
                    "name": t["name"],
                    "description": t["description"],
                    "input_schema": t["parameters"],
                }
                for t in TOOLS
            ],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "messages": history,
            "stream": True,
        }

    def first_turn(self, seed: int) -> list[Any]:
        return [{"role": "user", "content": [{"type": "text", "text": task_text(seed)}]}]

    def append(self, history: list[Any], answer: Answer, seed: int, turn: int) -> None:
        blocks: list[dict[str, Any]] = []
        if answer.text:
            blocks.append({"type": "text", "text": answer.text})
        for call_id, name, arguments in answer.calls:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": call_id,
                    "name": name,
                    "input": json.loads(arguments or "{}"),
                }
            )
        history.append({"role": "assistant", "content": blocks})
        results: list[dict[str, Any]] = [
            {"type": "tool_result", "tool_use_id": call_id, "content": tool_result(seed, turn)}
            for call_id, _, _ in answer.calls
        ]
        history.append({"role": "user", "content": results or [{"type": "text", "text": "Go on."}]})

    def is_output(self, event_type: str, data: dict[str, Any]) -> bool:
        return event_type == "content_block_delta"

    def read(self, events: list[tuple[str, dict[str, Any]]]) -> Answer:
        answer = Answer()
        blocks: dict[int, dict[str, Any]] = {}
        for event_type, data in events:
            if event_type == "content_block_start":
                blocks[data["index"]] = {**data["content_block"], "json": ""}
            elif event_type == "content_block_delta":
                block, delta = blocks[data["index"]], data["delta"]
                if delta["type"] == "text_delta":
                    block["text"] = block.get("text", "") + delta["text"]
                elif delta["type"] == "input_json_delta":
                    block["json"] += delta["partial_json"]
        for _, block in sorted(blocks.items()):
            if block["type"] == "text":
                answer.text += block.get("text", "")
            elif block["type"] == "tool_use":
                answer.calls.append((block["id"], block["name"], block["json"] or "{}"))
        return answer


class ChatDialect:
    path = "/v1/chat/completions"

    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {API_KEY}"}

    def body(self, model: str, seed: int, history: list[Any]) -> dict[str, Any]:
        return {
            "model": model,
            "messages": [{"role": "system", "content": SYSTEM_PROMPT}, *history],
            "tools": [{"type": "function", "function": tool} for tool in TOOLS],
            "tool_choice": "required",
            "parallel_tool_calls": False,
            "max_completion_tokens": MAX_TOKENS,
            "stream": True,
            "stream_options": {"include_usage": True},
        }

    def first_turn(self, seed: int) -> list[Any]:
        return [{"role": "user", "content": task_text(seed)}]

    def append(self, history: list[Any], answer: Answer, seed: int, turn: int) -> None:
        message: dict[str, Any] = {"role": "assistant", "content": answer.text or None}
        if answer.calls:
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
                for call_id, name, arguments in answer.calls
            ]
        history.append(message)
        for call_id, _, _ in answer.calls:
            history.append(
                {"role": "tool", "tool_call_id": call_id, "content": tool_result(seed, turn)}
            )
        if not answer.calls:
            history.append({"role": "user", "content": "Go on."})

    def is_output(self, event_type: str, data: dict[str, Any]) -> bool:
        for choice in data.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("content") or delta.get("tool_calls"):
                return True
        return False

    def read(self, events: list[tuple[str, dict[str, Any]]]) -> Answer:
        answer = Answer()
        calls: dict[int, list[str]] = {}
        for _, data in events:
            for choice in data.get("choices") or ():
                delta = choice.get("delta") or {}
                answer.text += delta.get("content") or ""
                for call in delta.get("tool_calls") or ():
                    entry = calls.setdefault(call["index"], ["", "", ""])
                    function = call.get("function") or {}
                    entry[0] = call.get("id") or entry[0]
                    entry[1] = function.get("name") or entry[1]
                    entry[2] += function.get("arguments") or ""
        answer.calls = [(c[0], c[1], c[2]) for _, c in sorted(calls.items())]
        return answer


DIALECTS: dict[str, Dialect] = {
    "chat": ChatDialect(),
    "responses": ResponsesDialect(),
    "messages": MessagesDialect(),
}


def sse_events(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event type, data) per SSE event; the type from ``event:`` or the data's ``type``."""
    event_type = ""
    for line in lines:
        if line.startswith("event:"):
            event_type = line[6:].strip()
        elif line.startswith("data:"):
            payload = line[5:].strip()
            if payload == "[DONE]":
                continue
            data = json.loads(payload)
            yield event_type or str(data.get("type", "")), data
        elif not line:
            event_type = ""


def traceparent(api: str, seed: int, turn: int, caller: str) -> str:
    """The W3C traceparent of one turn: its trace id names the turn (the same whoever sends
    it), its parent span the caller. The tail simulator draws latency by trace, so a turn
    sent direct and the same turn sent through hasten meet the same straggler (hasten's hedge
    of it, its second sending, draws afresh): the comparison measures the systems, not which
    of them happened to draw the slower stragglers."""
    trace_id = hashlib.blake2b(f"{api}:{seed}:{turn}".encode(), digest_size=16).hexdigest()
    span_id = hashlib.blake2b(caller.encode(), digest_size=8).hexdigest()
    return f"00-{trace_id}-{span_id}-01"


def run_turn(
    client: httpx.Client,
    base_url: str,
    dialect: Dialect,
    body: dict[str, Any],
    trace: str,
) -> tuple[Turn, Answer]:
    content = json.dumps(body).encode()
    headers = {**dialect.headers(), "content-type": "application/json", "traceparent": trace}
    started_s = time.perf_counter()
    ttft_ms: float | None = None
    events: list[tuple[str, dict[str, Any]]] = []
    with client.stream("POST", base_url + dialect.path, content=content, headers=headers) as r:
        if r.status_code != 200:
            r.read()
            raise RuntimeError(f"{base_url}{dialect.path}: {r.status_code} {r.text[:300]}")
        for event_type, data in sse_events(r.iter_lines()):
            if ttft_ms is None and dialect.is_output(event_type, data):
                ttft_ms = (time.perf_counter() - started_s) * 1000
            events.append((event_type, data))
        e2e_ms = (time.perf_counter() - started_s) * 1000
        turn = Turn(
            ttft_ms=ttft_ms,
            e2e_ms=e2e_ms,
            cache=r.headers.get("x-hasten-cache", ""),
            hedge=r.headers.get("x-hasten-hedge", ""),
            status=r.status_code,
            request_bytes=len(content),
        )
    return turn, dialect.read(events)


@dataclass(slots=True)
class TaskRun:
    turns: list[Turn]
    task_s: float
    answers: list[Answer]


def run_task(
    client: httpx.Client,
    base_url: str,
    api: str,
    model: str,
    seed: int,
    num_turns: int,
    caller: str,
) -> TaskRun:
    """The whole task, turn after turn: a bounded loop of ``num_turns`` requests, each traced
    as ``caller``'s (``traceparent``)."""
    dialect = DIALECTS[api]
    history = dialect.first_turn(seed)
    turns: list[Turn] = []
    answers: list[Answer] = []
    started_s = time.perf_counter()
    for index in range(num_turns):
        body = dialect.body(model, seed, history)
        trace = traceparent(api, seed, index, caller)
        turn, answer = run_turn(client, base_url, dialect, body, trace)
        turns.append(turn)
        answers.append(answer)
        dialect.append(history, answer, seed, index)
    return TaskRun(turns, time.perf_counter() - started_s, answers)
