"""Messages <-> Chat Completions: requests both ways, answers (whole and streamed), errors.

Requests (``messages_request_to_chat``, ``chat_request_to_messages``):

    system                <-> leading system (and developer, from chat) messages: a string
                          as a string, blocks as text parts
    messages              user text and images (base64 <-> a data URL, url <-> url);
                          ``tool_result`` blocks <-> tool messages (placed before the rest
                          of their user turn, as Anthropic requires them first); assistant
                          text and ``tool_use`` <-> content and ``tool_calls`` (input as
                          JSON arguments)
    tools, tool_choice    custom tools <-> function tools (input_schema <-> parameters);
                          auto/any/tool/none <-> auto/required/function/none;
                          ``disable_parallel_tool_use`` <-> ``parallel_tool_calls``
    max_tokens            <-> max_tokens (or max_completion_tokens: ``max_tokens_field``);
                          Anthropic requires it, so a chat request without one gets
                          ``default_max_tokens``
    stop_sequences        <-> stop
    metadata.user_id      <-> user
    output_config.format  <-> response_format json_schema; output_config.effort <->
                          reasoning_effort
    the same in both      model, stream, temperature, top_p, top_k (an extension most
                          chat servers accept)

Dropped, since chat has nowhere to put them and the answer does not depend on them:
toward chat every ``cache_control`` (a chat upstream rejects it: litellm#38790), a
``tool_result``'s ``is_error`` (its content says what failed), ``thinking`` and earlier
thinking blocks (a chat model reasons as it does; its ``reasoning_content`` comes back as
thinking blocks), ``service_tier``; toward Messages an image's ``detail``, ``seed``,
``store``, ``metadata`` (Anthropic's holds ``user_id`` only), ``service_tier``,
``prompt_cache_key``, ``safety_identifier``, ``verbosity``, ``prediction``,
``stream_options``, a ``reasoning_effort`` of ``none``, messages' ``name``, an
assistant's ``reasoning_content``, ``n: 1``, ``logprobs: false``.

Refused with ``InvalidRequest`` naming the field: toward chat Anthropic's server tools
(``web_search_20250305``, ``bash_20250124``...), documents, images by ``file`` id, images
inside tool results, server tool blocks, ``container``, ``mcp_servers``,
``context_management`` edits other than ``clear_thinking_*`` (those are dropped with the
thinking blocks they edit); toward Messages a system message after the conversation began,
``n`` > 1, ``temperature`` above 1, non-zero penalties, ``logit_bias``, ``logprobs``,
audio, files, ``json_object`` output, ``web_search_options``, legacy functions, tool call
arguments that are not a JSON object.

Fields neither side knows are carried over under their name: the upstream judges them.

Answers: ``chat_body_to_messages`` and ``ChatToMessagesStream`` (an Anthropic client, a
chat upstream), ``messages_body_to_chat`` and ``MessagesToChatStream`` (a chat client, an
Anthropic upstream). Stop reasons:
stop <-> end_turn (stop_sequence and pause_turn read as stop), length <-> max_tokens
(and model_context_window_exceeded), tool_calls <-> tool_use, content_filter <-> refusal;
a chat choice naming the stop string that ended it (vLLM's ``stop_reason``) gives
``stop_sequence`` and that string.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from hasten.apis import ids, messages, responses
from hasten.apis.fields import translating
from hasten.apis.messages import new_message
from hasten.apis.usage import Usage, from_chat, from_messages, to_chat, to_messages
from hasten.errors import InvalidRequest

DEFAULT_MAX_TOKENS = 4096
UNSUPPORTED = "unsupported_parameter"
_DATA_URL = re.compile(r"data:(?P<media>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)", re.DOTALL)
_EFFORTS = ("low", "medium", "high", "xhigh", "max")
_SAME_FIELDS = ("model", "stream", "temperature", "top_p", "top_k")
_MESSAGES_HANDLED = frozenset(
    {
        *_SAME_FIELDS,
        "messages",
        "system",
        "tools",
        "tool_choice",
        "max_tokens",
        "stop_sequences",
        "metadata",
        "output_config",
        "thinking",
        "cache_control",
        "service_tier",
        "context_management",
    }
)
_MESSAGES_REFUSED = ("container", "mcp_servers")
# Context edits that touch only thinking blocks, which go nowhere toward chat anyway (Claude
# Code 2.1 sends clear_thinking_20251015 with every request).
_THINKING_EDIT = "clear_thinking_"
_CHAT_HANDLED = frozenset(
    {
        *_SAME_FIELDS,
        "messages",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "user",
        "response_format",
        "reasoning_effort",
        "n",
        "frequency_penalty",
        "presence_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "modalities",
        "audio",
        "web_search_options",
        "functions",
        "function_call",
        "seed",
        "store",
        "metadata",
        "service_tier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "safety_identifier",
        "verbosity",
        "prediction",
        "stream_options",
    }
)
_TO_CHAT_STOPS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
_TO_MESSAGES_STOPS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


def _refuse(param: str, what: str) -> InvalidRequest:
    return InvalidRequest(f"{what} ('{param}')", param=param, code=UNSUPPORTED)


def chat_finish_reason(stop_reason: Any) -> str:
    return _TO_CHAT_STOPS.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"


def messages_stop_reason(finish_reason: Any) -> str:
    if not isinstance(finish_reason, str):
        return "end_turn"
    return _TO_MESSAGES_STOPS.get(finish_reason, "end_turn")


# --- Messages -> Chat requests ----------------------------------------------------------


def _check_context_edits(management: Any) -> None:
    """``context_management`` goes nowhere toward chat: fine for edits of thinking blocks
    alone (dropped with them); an edit that clears tool uses would change what the model
    reads once its trigger is reached, so it is refused, named."""
    if management is None:
        return
    edits = management.get("edits") if isinstance(management, Mapping) else None
    if not isinstance(edits, list):
        raise _refuse("context_management", "'context_management' without a list of edits")
    for index, edit in enumerate(edits):
        kind = edit.get("type") if isinstance(edit, Mapping) else None
        if not (isinstance(kind, str) and kind.startswith(_THINKING_EDIT)):
            param = f"context_management.edits.{index}.type"
            raise _refuse(param, f"the context edit {kind!r} cannot be applied by a chat upstream")


def messages_request_to_chat(
    body: Mapping[str, Any], *, max_tokens_field: str = "max_tokens"
) -> dict[str, Any]:
    """The Chat Completions request that asks what the Messages request ``body`` (already
    checked by ``messages.check_request``) asks; ``cache_control`` never goes along."""
    for name in _MESSAGES_REFUSED:
        if body.get(name) is not None:
            raise _refuse(name, f"'{name}' cannot be translated to Chat Completions")
    _check_context_edits(body.get("context_management"))
    chat: dict[str, Any] = {}
    for name in _SAME_FIELDS:
        if body.get(name) is not None:
            chat[name] = body[name]
    chat_messages: list[dict[str, Any]] = []
    system = body.get("system")
    if isinstance(system, str):
        chat_messages.append({"role": "system", "content": system})
    elif isinstance(system, list):
        with translating("system"):
            parts = [{"type": "text", "text": block["text"]} for block in system]
        chat_messages.append({"role": "system", "content": parts})
    for index, message in enumerate(body.get("messages") or ()):
        with translating(f"messages.{index}"):
            chat_messages.extend(_message_to_chat(message, f"messages.{index}"))
    chat["messages"] = chat_messages
    if body.get("tools") is not None:
        tools = []
        for i, tool in enumerate(body["tools"]):
            with translating(f"tools.{i}"):
                tools.append(_tool_to_chat(tool, f"tools.{i}"))
        chat["tools"] = tools
    choice = body.get("tool_choice")
    if isinstance(choice, Mapping):
        with translating("tool_choice"):
            chat["tool_choice"] = _tool_choice_to_chat(choice)
        if choice.get("disable_parallel_tool_use") is not None:
            chat["parallel_tool_calls"] = not choice["disable_parallel_tool_use"]
    if body.get("max_tokens") is not None:
        chat[max_tokens_field] = body["max_tokens"]
    if body.get("stop_sequences") is not None:
        with translating("stop_sequences"):
            chat["stop"] = list(body["stop_sequences"])
    metadata = body.get("metadata")
    if isinstance(metadata, Mapping) and metadata.get("user_id") is not None:
        chat["user"] = metadata["user_id"]
    config = body.get("output_config")
    if isinstance(config, Mapping):
        form = config.get("format")
        if isinstance(form, Mapping) and form.get("type") == "json_schema":
            schema = {"name": "output", "schema": form.get("schema"), "strict": True}
            chat["response_format"] = {"type": "json_schema", "json_schema": schema}
        if config.get("effort") is not None:
            chat["reasoning_effort"] = config["effort"]
    if chat.get("stream") is True:
        chat["stream_options"] = {"include_usage": True}
    for name, value in body.items():
        if name not in _MESSAGES_HANDLED and name not in chat:
            chat[name] = value
    return chat


def _message_to_chat(message: Mapping[str, Any], param: str) -> list[dict[str, Any]]:
    role = message["role"]
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if role == "system":  # a system turn of text blocks, mid-conversation
        texts: list[str] = []
        for block in content or ():
            text = block.get("text") if isinstance(block, dict) else None
            if not isinstance(text, str):
                raise _refuse(f"{param}.content", "a system turn holds text blocks only")
            texts.append(text)
        return [{"role": "system", "content": "\n\n".join(texts)}]
    if role == "assistant":
        return [_assistant_to_chat(content or [], param)]
    tool_messages: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for index, block in enumerate(content or ()):
        where = f"{param}.content.{index}"
        if block.get("type") == "tool_result":
            tool_messages.append(
                {
                    "role": "tool",
                    "tool_call_id": block["tool_use_id"],
                    "content": _tool_result_to_chat(block.get("content"), f"{where}.content"),
                }
            )
        else:
            parts.append(_user_block_to_chat(block, where))
    if parts or not tool_messages:
        tool_messages.append({"role": "user", "content": parts})
    return tool_messages


def _user_block_to_chat(block: Mapping[str, Any], param: str) -> dict[str, Any]:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": block["text"]}
    if kind == "image":
        source = block["source"]
        if source.get("type") == "base64":
            url = f"data:{source.get('media_type')};base64,{source.get('data')}"
        elif source.get("type") == "url":
            url = source["url"]
        else:
            raise _refuse(
                f"{param}.source.type", "an image given by file id has no Chat Completions form"
            )
        return {"type": "image_url", "image_url": {"url": url}}
    raise _refuse(f"{param}.type", f"content blocks of type '{kind}' have no Chat Completions form")


def _tool_result_to_chat(content: Any, param: str) -> Any:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for index, block in enumerate(content):
        if block.get("type") != "text":
            raise _refuse(
                f"{param}.{index}.type", "a Chat Completions tool message carries text only"
            )
        parts.append({"type": "text", "text": block["text"]})
    return parts


def _assistant_to_chat(blocks: list[Any], param: str) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for index, block in enumerate(blocks):
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "tool_use":
            arguments = orjson.dumps(block["input"]).decode()
            calls.append(
                {
                    "id": block["id"],
                    "type": "function",
                    "function": {"name": block["name"], "arguments": arguments},
                }
            )
        elif kind in ("thinking", "redacted_thinking"):
            continue
        else:
            raise _refuse(
                f"{param}.content.{index}.type",
                f"content blocks of type '{kind}' have no Chat Completions form",
            )
    message: dict[str, Any] = {"role": "assistant", "content": parts or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_to_chat(tool: Mapping[str, Any], param: str) -> dict[str, Any]:
    if tool.get("type") not in (None, "custom"):
        raise _refuse(
            f"{param}.type",
            f"the server tool '{tool.get('type')}' cannot be sent to a Chat Completions upstream",
        )
    function: dict[str, Any] = {"name": tool["name"]}
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    function["parameters"] = tool["input_schema"]
    if tool.get("strict") is not None:
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def _tool_choice_to_chat(choice: Mapping[str, Any]) -> Any:
    kind = choice.get("type")
    if kind == "any":
        return "required"
    if kind == "tool":
        return {"type": "function", "function": {"name": choice["name"]}}
    return kind  # auto, none


# --- Chat -> Messages requests ----------------------------------------------------------


def chat_request_to_messages(
    body: Mapping[str, Any], *, default_max_tokens: int = DEFAULT_MAX_TOKENS
) -> dict[str, Any]:
    """The Messages request that asks what the chat request ``body`` asks. Raises
    ``InvalidRequest`` for what the Messages API cannot express."""
    _refuse_chat_only(body)
    request: dict[str, Any] = {}
    for name in _SAME_FIELDS:
        if body.get(name) is not None:
            request[name] = body[name]
    temperature = body.get("temperature")
    if isinstance(temperature, int | float) and temperature > 1:
        raise _refuse("temperature", "the Messages API takes a temperature from 0 to 1")
    chat_messages = list(body.get("messages") or ())
    system: list[dict[str, Any]] = []
    strings: list[str] = []
    start = 0
    while start < len(chat_messages) and _role(chat_messages[start]) in ("system", "developer"):
        with translating(f"messages[{start}]"):
            content = chat_messages[start].get("content")
            if isinstance(content, str):
                strings.append(content)
                system.append({"type": "text", "text": content})
            else:
                for index, part in enumerate(content or ()):
                    if part.get("type") != "text":
                        raise _refuse(
                            f"messages[{start}].content[{index}].type",
                            "a system prompt is text only",
                        )
                    system.append({"type": "text", "text": part["text"]})
                    strings.append("")
        start += 1
    if system:
        is_one_string = len(strings) == 1 and isinstance(chat_messages[0].get("content"), str)
        request["system"] = strings[0] if is_one_string else system
    request["messages"] = _messages_from_chat(chat_messages, start)
    if body.get("tools") is not None:
        tools = []
        for i, tool in enumerate(body["tools"]):
            with translating(f"tools[{i}]"):
                tools.append(_tool_from_chat(tool, f"tools[{i}]"))
        request["tools"] = tools
    with translating("tool_choice"):
        choice = _tool_choice_from_chat(body.get("tool_choice"))
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and (choice is not None or parallel is False):
        choice = choice or {"type": "auto"}
        choice["disable_parallel_tool_use"] = not parallel
    if choice is not None:
        request["tool_choice"] = choice
    limit = body.get("max_completion_tokens")
    if limit is None:
        limit = body.get("max_tokens")
    request["max_tokens"] = limit if limit is not None else default_max_tokens
    stop = body.get("stop")
    if isinstance(stop, str):
        request["stop_sequences"] = [stop]
    elif isinstance(stop, list):
        request["stop_sequences"] = list(stop)
    if body.get("user") is not None:
        request["metadata"] = {"user_id": body["user"]}
    with translating("response_format"):
        config = _output_config(body)
    if config:
        request["output_config"] = config
    for name, value in body.items():
        if name not in _CHAT_HANDLED and name not in request:
            request[name] = value
    return request


def _refuse_chat_only(body: Mapping[str, Any]) -> None:
    if body.get("n") not in (None, 1):
        raise _refuse("n", "the Messages API gives one answer per request")
    for name in ("frequency_penalty", "presence_penalty"):
        if body.get(name) not in (None, 0):
            raise _refuse(name, f"the Messages API has no {name}")
    if body.get("logit_bias"):
        raise _refuse("logit_bias", "the Messages API has no logit_bias")
    if body.get("logprobs") is True:
        raise _refuse("logprobs", "the Messages API returns no log probabilities")
    modalities = body.get("modalities")
    if body.get("audio") is not None or (modalities is not None and modalities != ["text"]):
        raise _refuse("modalities", "audio output cannot be translated to the Messages API")
    for name in ("web_search_options", "functions", "function_call"):
        if body.get(name) is not None:
            raise _refuse(name, f"'{name}' cannot be translated to the Messages API")


def _output_config(body: Mapping[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    form = body.get("response_format")
    if isinstance(form, Mapping):
        kind = form.get("type")
        if kind == "json_schema":
            schema = (form.get("json_schema") or {}).get("schema")
            config["format"] = {"type": "json_schema", "schema": schema}
        elif kind == "json_object":
            raise _refuse(
                "response_format.type", "the Messages API has JSON schema output, not json_object"
            )
    effort = body.get("reasoning_effort")
    if effort == "minimal":
        effort = "low"
    if effort in _EFFORTS:
        config["effort"] = effort
    elif effort not in (None, "none"):
        raise _refuse("reasoning_effort", f"the Messages API has no effort '{effort}'")
    return config


def _messages_from_chat(chat_messages: list[Any], start: int) -> list[dict[str, Any]]:
    converted: list[dict[str, Any]] = []
    after_tools = False  # the last message holds tool results: a user turn joins it
    for index in range(start, len(chat_messages)):
        message = chat_messages[index]
        param = f"messages[{index}]"
        with translating(param):
            role = message.get("role")
            if role == "tool":
                block = {
                    "type": "tool_result",
                    "tool_use_id": message.get("tool_call_id"),
                    "content": _tool_content_from_chat(message.get("content")),
                }
                if after_tools:
                    converted[-1]["content"].append(block)
                else:
                    converted.append({"role": "user", "content": [block]})
                after_tools = True
                continue
            if role == "user":
                content = message.get("content")
                if isinstance(content, list):
                    content = [
                        _part_from_chat(p, f"{param}.content[{i}]") for i, p in enumerate(content)
                    ]
                if after_tools:
                    blocks = (
                        [{"type": "text", "text": content}] if isinstance(content, str) else content
                    )
                    converted[-1]["content"].extend(blocks)
                else:
                    converted.append({"role": "user", "content": content})
            elif role == "assistant":
                converted.append(_assistant_from_chat(message, param))
            elif role in ("system", "developer"):
                raise _refuse(
                    f"{param}.role",
                    "the Messages API has one system prompt, before the conversation",
                )
            else:
                raise _refuse(f"{param}.role", f"messages of role '{role}' have no Messages form")
            after_tools = False
    return converted


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, Mapping) else None


def _tool_content_from_chat(content: Any) -> Any:
    if isinstance(content, list):
        return [
            {"type": "text", "text": part.get("text", "")}
            for part in content
            if isinstance(part, Mapping)
        ]
    return content if content is not None else ""


def _part_from_chat(part: Mapping[str, Any], param: str) -> dict[str, Any]:
    kind = part.get("type")
    if kind == "text":
        return {"type": "text", "text": part["text"]}
    if kind == "image_url":
        url = (part.get("image_url") or {}).get("url") or ""
        data_url = _DATA_URL.fullmatch(url)
        if data_url is not None:
            source = {
                "type": "base64",
                "media_type": data_url["media"],
                "data": data_url["data"],
            }
        else:
            source = {"type": "url", "url": url}
        return {"type": "image", "source": source}
    raise _refuse(f"{param}.type", f"content parts of type '{kind}' have no Messages form")


def _assistant_from_chat(message: Mapping[str, Any], param: str) -> dict[str, Any]:
    content = message.get("content")
    calls = message.get("tool_calls") or ()
    refusal = message.get("refusal")
    if isinstance(content, str) and not calls and not refusal:
        return {"role": "assistant", "content": content}
    blocks: list[dict[str, Any]] = []
    if isinstance(content, str) and content:
        blocks.append({"type": "text", "text": content})
    elif isinstance(content, list):
        for part in content:
            if part.get("type") == "text":
                blocks.append({"type": "text", "text": part["text"]})
            elif part.get("type") == "refusal":
                blocks.append({"type": "text", "text": part.get("refusal", "")})
    if refusal:
        blocks.append({"type": "text", "text": refusal})
    for index, call in enumerate(calls):
        function = call.get("function") or {}
        where = f"{param}.tool_calls[{index}].function.arguments"
        try:
            arguments = orjson.loads(function.get("arguments") or "{}")
        except orjson.JSONDecodeError:
            arguments = None
        if not isinstance(arguments, dict):
            raise _refuse(where, "tool call arguments must be a JSON object for the Messages API")
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id"),
                "name": function.get("name"),
                "input": arguments,
            }
        )
    return {"role": "assistant", "content": blocks}


def _tool_from_chat(tool: Mapping[str, Any], param: str) -> dict[str, Any]:
    if tool.get("type") != "function":
        raise _refuse(f"{param}.type", f"tools of type '{tool.get('type')}' have no Messages form")
    function = tool.get("function") or {}
    converted: dict[str, Any] = {"name": function.get("name")}
    if function.get("description") is not None:
        converted["description"] = function["description"]
    parameters = function.get("parameters")
    converted["input_schema"] = (
        parameters if parameters is not None else {"type": "object", "properties": {}}
    )
    if function.get("strict") is not None:
        converted["strict"] = function["strict"]
    return converted


def _tool_choice_from_chat(choice: Any) -> dict[str, Any] | None:
    if choice is None:
        return None
    if choice == "required":
        return {"type": "any"}
    if choice in ("auto", "none"):
        return {"type": choice}
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        return {"type": "tool", "name": (choice.get("function") or {}).get("name")}
    raise _refuse("tool_choice", "this tool_choice has no Messages form")


# --- whole answers ----------------------------------------------------------------------


def chat_body_to_messages(
    chat: Mapping[str, Any], *, message_id: str, model: str | None = None
) -> dict[str, Any]:
    """The Message for a whole chat completion (its first choice). Raises ValueError for a
    body without the chat shape, or a tool call whose arguments are not a JSON object."""
    try:
        choice = chat["choices"][0]
        message = choice["message"]
        blocks: list[dict[str, Any]] = []
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            blocks.append({"type": "thinking", "thinking": reasoning, "signature": ""})
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(str(part.get("text", "")) for part in content)
        if isinstance(content, str) and content:
            blocks.append({"type": "text", "text": content})
        if message.get("refusal"):
            blocks.append({"type": "text", "text": message["refusal"]})
        for index, call in enumerate(message.get("tool_calls") or ()):
            function = call["function"]
            arguments = orjson.loads(function.get("arguments") or "{}")
            if not isinstance(arguments, dict):
                raise ValueError("tool call arguments that are not a JSON object")
            blocks.append(
                {
                    "type": "tool_use",
                    "id": call.get("id") or ids.call_id(message_id, index),
                    "name": function["name"],
                    "input": arguments,
                }
            )
        stop_reason = messages_stop_reason(choice.get("finish_reason"))
        matched = choice.get("stop_reason")
    except (KeyError, IndexError, TypeError, AttributeError, orjson.JSONDecodeError) as exc:
        raise ValueError("not a chat completion body") from exc
    if message.get("refusal") and stop_reason == "end_turn":
        stop_reason = "refusal"
    stop_sequence = None
    if stop_reason == "end_turn" and isinstance(matched, str) and matched:
        stop_reason, stop_sequence = "stop_sequence", matched
    chat_model = chat.get("model")
    return new_message(
        message_id=message_id,
        model=chat_model if isinstance(chat_model, str) else (model or ""),
        content=blocks,
        stop_reason=stop_reason,
        stop_sequence=stop_sequence,
        usage=from_chat(chat.get("usage")),
    )


def messages_body_to_chat(
    message: Mapping[str, Any], *, created: int, chat_id: str | None = None
) -> dict[str, Any]:
    """The chat completion for a whole Message. Raises ValueError for another shape."""
    try:
        texts: list[str] = []
        thinking: list[str] = []
        calls: list[dict[str, Any]] = []
        for block in message["content"]:
            kind = block.get("type")
            if kind == "text":
                texts.append(block["text"])
            elif kind == "thinking":
                thinking.append(block["thinking"])
            elif kind == "tool_use":
                calls.append(_chat_call(block))
        chat_message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(texts) if texts or not calls else None,
            "refusal": None,
        }
        if thinking:
            chat_message["reasoning_content"] = "".join(thinking)
        if calls:
            chat_message["tool_calls"] = calls
        usage = from_messages(message.get("usage"))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError("not a Messages API message") from exc
    return {
        "id": chat_id or "chatcmpl-" + str(message.get("id", "")),
        "object": "chat.completion",
        "created": created,
        "model": message.get("model"),
        "choices": [
            {
                "index": 0,
                "message": chat_message,
                "logprobs": None,
                "finish_reason": chat_finish_reason(message.get("stop_reason")),
            }
        ],
        "usage": to_chat(usage if usage is not None else Usage(0, 0)),
    }


def _chat_call(block: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": block["id"],
        "type": "function",
        "function": {"name": block["name"], "arguments": orjson.dumps(block["input"]).decode()},
    }


# --- errors -----------------------------------------------------------------------------


def messages_error_to_chat(status: int, body: bytes) -> bytes:
    """An Anthropic error body in OpenAI's shape (its type kept as the code)."""
    message, kind = _error_parts(body, lambda parsed: parsed.get("error"))
    return responses.error_body(status, message or f"upstream answered {status}", kind)


def chat_error_to_messages(status: int, body: bytes) -> bytes:
    """An OpenAI-shaped error body in Anthropic's shape (its type from the status)."""
    message, _ = _error_parts(body, lambda parsed: parsed.get("error"))
    return messages.error_body(status, message or f"upstream answered {status}")


def _error_parts(body: bytes, pick: Any) -> tuple[str, str | None]:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    error = pick(parsed) if isinstance(parsed, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        kind = error.get("type") if isinstance(error.get("type"), str) else None
        return error["message"], kind
    return body.decode("utf-8", "replace").strip()[:500], None


def chat_error_event(message: str, code: str = "upstream_stream_error") -> dict[str, Any]:
    """The error event a chat stream ends with (``data: {"error": {...}}``, no [DONE])."""
    return {"error": {"message": message, "type": "server_error", "param": None, "code": code}}


# --- chat streams as Messages streams ---------------------------------------------------


class ChatToMessagesStream:
    """A chat completion stream, chunk by chunk, as Anthropic's event sequence.

    ``start()`` gives ``message_start`` (and a ``ping``): send it at once, never held back
    until the first token or the end of thinking (litellm#39431). ``feed(chunk)`` gives the
    events one parsed chunk implies: content blocks open and close as the chunk's kind of
    output changes (reasoning -> thinking, content -> text, each tool call -> tool_use
    with ``input_json_delta``). ``finish()`` closes the open block, then
    ``message_delta`` (stop reason, cumulative usage) and ``message_stop``; ``fail()``
    ends a broken stream with an ``error`` event. Anthropic streams blocks one at a time:
    a chat upstream interleaving two tool calls' arguments is a ValueError from ``feed``.
    """

    def __init__(
        self,
        *,
        message_id: str | None = None,
        model: str,
        input_usage: Usage | None = None,
    ) -> None:
        self.message_id = message_id if message_id is not None else ids.new_message_id()
        self.model = model
        self._usage = input_usage
        self._events: list[dict[str, Any]] = []
        self._block_index = -1
        self._block_kind: str | None = None  # "thinking", "text", "tool_use" or None
        self._calls: dict[int, dict[str, Any]] = {}  # chat tool call index -> state
        self._open_call: int | None = None
        self._finish_reason: str | None = None
        self._stop_sequence: str | None = None
        self._has_refusal = False
        self._is_started = False
        self._is_ended = False

    def start(self) -> list[dict[str, Any]]:
        if not self._is_started:
            self._is_started = True
            usage = to_messages(self._usage if self._usage is not None else Usage(0, 0))
            opening = new_message(message_id=self.message_id, model=self.model)
            opening["usage"] = usage
            self._events.append({"type": messages.MESSAGE_START, "message": opening})
            self._events.append({"type": messages.PING})
        return self._take()

    def feed(self, chunk: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The events for one parsed ``chat.completion.chunk``; ValueError for a chunk
        without the chat shape, interleaved tool calls, or a feed after the end."""
        if self._is_ended:
            raise ValueError("the stream has ended")
        self.start()
        try:
            self._feed(chunk)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError("not a chat completion chunk") from exc
        return self._take()

    def finish(self) -> list[dict[str, Any]]:
        if self._is_ended:
            return []
        self.start()
        self._close_block()
        stop_reason = messages_stop_reason(self._finish_reason)
        if self._has_refusal and stop_reason == "end_turn":
            stop_reason = "refusal"
        stop_sequence = None
        if stop_reason == "end_turn" and self._stop_sequence:
            stop_reason, stop_sequence = "stop_sequence", self._stop_sequence
        usage = to_messages(self._usage) if self._usage is not None else {"output_tokens": 0}
        delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
        self._events.append({"type": messages.MESSAGE_DELTA, "delta": delta, "usage": usage})
        self._events.append({"type": messages.MESSAGE_STOP})
        self._is_ended = True
        return self._take()

    def fail(self, message: str, kind: str = "api_error") -> list[dict[str, Any]]:
        """An ``error`` event (after ``message_start`` if none was sent); nothing follows."""
        if self._is_ended:
            return []
        self.start()
        self._events.append(messages.error_event(message, kind))
        self._is_ended = True
        return self._take()

    def _take(self) -> list[dict[str, Any]]:
        events, self._events = self._events, []
        return events

    def _feed(self, chunk: Mapping[str, Any]) -> None:
        usage = from_chat(chunk.get("usage"))
        if usage is not None:
            self._usage = usage
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self._delta("thinking", {"type": "thinking_delta", "thinking": reasoning})
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._delta("text", {"type": "text_delta", "text": content})
            refusal = delta.get("refusal")
            if isinstance(refusal, str) and refusal:
                self._has_refusal = True
                self._delta("text", {"type": "text_delta", "text": refusal})
            for call in delta.get("tool_calls") or ():
                self._call(call)
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]
                matched = choice.get("stop_reason")
                if isinstance(matched, str) and matched:
                    self._stop_sequence = matched

    def _open_block(self, block: dict[str, Any]) -> None:
        self._close_block()
        self._block_index += 1
        self._block_kind = block["type"]
        self._events.append(
            {"type": messages.BLOCK_START, "index": self._block_index, "content_block": block}
        )

    def _close_block(self) -> None:
        if self._block_kind is None:
            return
        if self._open_call is not None:
            self._calls[self._open_call]["is_closed"] = True
            self._open_call = None
        self._events.append({"type": messages.BLOCK_STOP, "index": self._block_index})
        self._block_kind = None

    def _delta(self, kind: str, delta: dict[str, Any]) -> None:
        if self._block_kind != kind:
            self._open_block(messages.opened_block({"type": kind}))
        self._events.append(
            {"type": messages.BLOCK_DELTA, "index": self._block_index, "delta": delta}
        )

    def _call(self, delta: Mapping[str, Any]) -> None:
        position = delta.get("index", len(self._calls))
        function = delta.get("function") or {}
        state = self._calls.get(position)
        if state is None:
            state = self._calls[position] = {
                "id": None,
                "name": None,
                "pending": "",
                "is_open": False,
                "is_closed": False,
            }
        if state["is_closed"]:
            raise ValueError("a chat upstream interleaved tool calls")
        state["id"] = state["id"] or delta.get("id")
        state["name"] = state["name"] or function.get("name")
        piece = function.get("arguments") or ""
        if not state["is_open"]:
            state["pending"] += piece
            if state["name"] is None:
                return
            block = {
                "type": "tool_use",
                "id": state["id"] or ids.call_id(self.message_id, position),
                "name": state["name"],
                "input": {},
            }
            self._open_block(block)
            state["is_open"] = True
            self._open_call = position
            piece, state["pending"] = state["pending"], ""
        elif self._open_call != position:
            raise ValueError("a chat upstream interleaved tool calls")
        if piece:
            delta_event = {"type": "input_json_delta", "partial_json": piece}
            self._events.append(
                {"type": messages.BLOCK_DELTA, "index": self._block_index, "delta": delta_event}
            )


# --- Messages streams as chat streams ---------------------------------------------------


class MessagesToChatStream:
    """An Anthropic stream, event by event, as ``chat.completion.chunk`` dicts (the caller
    frames them and adds ``[DONE]``): the role first, content deltas, tool calls with
    their index, id, name and argument deltas, ``reasoning_content`` for thinking, the
    finish reason, and a usage chunk at ``message_stop`` when ``include_usage``.

    Error events are the caller's to notice (``messages.event_error``): ``feed`` refuses
    them with ValueError rather than end the stream silently; ``fail`` gives the chat
    error event that ends a broken stream.
    """

    def __init__(
        self, *, created: int, include_usage: bool = True, chat_id: str | None = None
    ) -> None:
        self.created = created
        self.include_usage = include_usage
        self.chat_id = chat_id
        self.model: str | None = None
        self._usage: Usage | None = None
        self._calls: dict[int, int] = {}  # content block index -> chat tool call index
        self._is_ended = False

    def feed(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        if self._is_ended:
            raise ValueError("the stream has ended")
        try:
            return self._feed(event)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError("not a Messages stream event") from exc

    def finish(self) -> list[dict[str, Any]]:
        """Nothing more after ``message_stop``; the caller treats a stream that ended
        without it as broken."""
        self._is_ended = True
        return []

    def fail(self, message: str, code: str = "upstream_stream_error") -> list[dict[str, Any]]:
        self._is_ended = True
        return [chat_error_event(message, code)]

    def _chunk(self, delta: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "id": self.chat_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": []
            if delta is None
            else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def _feed(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        kind = event["type"]
        if kind == messages.MESSAGE_START:
            message = event["message"]
            self.model = message.get("model")
            if self.chat_id is None:
                self.chat_id = "chatcmpl-" + str(message.get("id", ""))
            self._usage = from_messages(message.get("usage"), self._usage)
            return [self._chunk({"role": "assistant", "content": ""})]
        if kind == messages.BLOCK_START:
            return self._block_start(event["index"], event["content_block"])
        if kind == messages.BLOCK_DELTA:
            return self._block_delta(event["index"], event["delta"])
        if kind == messages.MESSAGE_DELTA:
            self._usage = from_messages(event.get("usage"), self._usage)
            reason = chat_finish_reason(event["delta"].get("stop_reason"))
            return [self._chunk({}, reason)]
        if kind == messages.MESSAGE_STOP:
            self._is_ended = True
            if not self.include_usage:
                return []
            usage = self._usage if self._usage is not None else Usage(0, 0)
            chunk = self._chunk(None)
            chunk["usage"] = to_chat(usage)
            return [chunk]
        if kind == messages.ERROR:
            raise ValueError("an error event: the caller ends the stream with fail()")
        return []  # ping, content_block_stop, events this does not know

    def _block_start(self, index: int, block: Mapping[str, Any]) -> list[dict[str, Any]]:
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            return [self._chunk({"content": block["text"]})]
        if kind == "thinking" and block.get("thinking"):
            return [self._chunk({"reasoning_content": block["thinking"]})]
        if kind == "tool_use":
            position = len(self._calls)
            self._calls[index] = position
            start_input = block.get("input")
            arguments = orjson.dumps(start_input).decode() if start_input else ""
            call = {
                "index": position,
                "id": block["id"],
                "type": "function",
                "function": {"name": block["name"], "arguments": arguments},
            }
            return [self._chunk({"tool_calls": [call]})]
        return []

    def _block_delta(self, index: int, delta: Mapping[str, Any]) -> list[dict[str, Any]]:
        kind = delta["type"]
        if kind == "text_delta":
            return [self._chunk({"content": delta["text"]})]
        if kind == "thinking_delta":
            return [self._chunk({"reasoning_content": delta["thinking"]})]
        if kind == "input_json_delta" and index in self._calls:
            partial = delta["partial_json"]
            if not partial:
                return []
            call = {"index": self._calls[index], "function": {"arguments": partial}}
            return [self._chunk({"tool_calls": [call]})]
        return []  # signature_delta, citations_delta
