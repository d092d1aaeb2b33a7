"""Responses <-> Chat Completions: requests both ways, answers (whole and streamed) and errors.

Requests (``responses_request_to_chat``, ``chat_request_to_responses``):

    instructions          a leading system message (and back: messages stay input items)
    input                 string: one user message; items: ``message`` (roles kept; parts
                          input_text <-> text, input_image <-> image_url, input_file <->
                          file, input_audio <-> input_audio, output_text <-> assistant
                          text, refusal <-> the assistant's refusal), ``function_call``
                          (consecutive ones one assistant message's tool_calls, joined to
                          the assistant text just before them), ``function_call_output``
                          <-> a tool message (one with no ``call_id`` but a ``name``, the
                          client's own context such as Codex's ``goal_objective``: a user
                          message with its output)
    tools, tool_choice    function tools (``strict``: absent means true in Responses,
                          false in chat, so it is written out either way), allowed_tools;
                          a ``namespace`` tool's functions as chat functions named
                          ``ns__name`` (its calls, both ways, with their ``namespace``)
    text.format           <-> response_format (text, json_object, json_schema);
    text.verbosity        <-> verbosity
    reasoning.effort      <-> reasoning_effort
    max_output_tokens     <-> max_tokens (or max_completion_tokens: ``max_tokens_field``;
                          from chat, max_completion_tokens wins over max_tokens)
    top_logprobs, include ["message.output_text.logprobs"] <-> logprobs, top_logprobs
    the same in both      model, stream, temperature, top_p, parallel_tool_calls,
                          metadata, user, safety_identifier, prompt_cache_key,
                          prompt_cache_retention, service_tier

Dropped, since they do not change the answer or chat has nowhere to put them and the answer
does not depend on them: toward chat ``store`` (hasten keeps the state itself),
``truncation``, ``include`` (but the logprobs flag), ``max_tool_calls`` (it limits built-in
tools, which are refused), ``stream_options``, ``reasoning.summary`` and
``generate_summary``, a ``namespace`` tool's own description, ``reasoning`` input items
(the model's own earlier reasoning, often encrypted for its provider alone), items' ``id``
and ``status``, a false ``background``, a null ``previous_response_id``; toward Responses
``seed``, ``store`` (chat's stored completions; the request asks ``store: false``, hasten
keeps state), ``stream_options`` (Responses always reports usage), ``prediction``,
messages' ``name``, an assistant's ``reasoning_content``, ``n: 1``.

Refused with ``InvalidRequest`` naming the field (never a silent drop): toward chat a
built-in tool (``web_search``, ``file_search``, ``computer_use``, ``mcp``...) or a
``tool_choice`` naming one, input items chat has no form for (``item_reference``, hosted
tools' calls), an image by ``file_id`` or a file by ``file_url``, an image in a tool's
output, ``previous_response_id`` (the gateway expands it from its store first),
``background: true``, ``conversation``, ``prompt``, ``context_management``; toward
Responses ``n`` > 1, ``stop``, non-zero ``frequency_penalty``/``presence_penalty``, a
``logit_bias``, audio output (``modalities``, ``audio``), ``web_search_options``, legacy
``functions``/``function_call`` and ``function`` messages.

Fields neither side knows are carried over under their name: the upstream judges them.

Answers: ``chat_body_to_responses`` (whole) and ``ChatToResponsesStream`` (fed chunk by
chunk, it emits exactly OpenAI's event sequence). A chat answer's ``reasoning_content``
(vLLM, llama.cpp, DeepSeek) becomes a reasoning item; finish reasons map to the
response's status: ``length`` -> incomplete (``max_output_tokens``), ``content_filter``
-> incomplete (``content_filter``), the others -> completed.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import orjson

from hasten.apis import ids, responses
from hasten.apis.fields import translating
from hasten.apis.responses import EventSequence, new_response
from hasten.apis.usage import Usage, from_chat
from hasten.errors import InvalidRequest

LOGPROBS_INCLUDE = "message.output_text.logprobs"
UNSUPPORTED = "unsupported_parameter"
# Between a namespace and a function's name in the chat name of a namespaced function.
NAMESPACE_JOIN = "__"

_SAME_FIELDS = (
    "model",
    "stream",
    "temperature",
    "top_p",
    "parallel_tool_calls",
    "metadata",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "service_tier",
)
_RESPONSES_HANDLED = frozenset(
    {
        *_SAME_FIELDS,
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "text",
        "reasoning",
        "max_output_tokens",
        "top_logprobs",
        "include",
        "store",
        "truncation",
        "max_tool_calls",
        "stream_options",
        "background",
        "previous_response_id",
    }
)
# Fields whose meaning needs server-side state or machinery a chat upstream lacks.
_RESPONSES_REFUSED = ("conversation", "prompt", "context_management")
_CHAT_HANDLED = frozenset(
    {
        *_SAME_FIELDS,
        "messages",
        "tools",
        "tool_choice",
        "response_format",
        "verbosity",
        "reasoning_effort",
        "max_tokens",
        "max_completion_tokens",
        "logprobs",
        "top_logprobs",
        "n",
        "stop",
        "frequency_penalty",
        "presence_penalty",
        "logit_bias",
        "seed",
        "store",
        "stream_options",
        "prediction",
        "modalities",
        "audio",
        "web_search_options",
        "functions",
        "function_call",
    }
)


def _refuse(param: str, what: str) -> InvalidRequest:
    return InvalidRequest(f"{what} ('{param}')", param=param, code=UNSUPPORTED)


# --- Responses -> Chat requests ---------------------------------------------------------


def responses_request_to_chat(
    body: Mapping[str, Any], *, max_tokens_field: str = "max_tokens"
) -> dict[str, Any]:
    """The Chat Completions request that asks what the Responses request ``body`` (already
    checked by ``responses.check_request``) asks. Raises ``InvalidRequest`` for what chat
    cannot express."""
    if body.get("previous_response_id") is not None:
        raise _refuse(
            "previous_response_id",
            "previous_response_id must be expanded into the input before the request is "
            "translated to Chat Completions",
        )
    if body.get("background") is True:
        raise _refuse(
            "background", "background mode is not available on a Chat Completions upstream"
        )
    for name in _RESPONSES_REFUSED:
        if body.get(name) is not None:
            raise _refuse(name, f"'{name}' cannot be translated to Chat Completions")
    chat: dict[str, Any] = {}
    for name in _SAME_FIELDS:
        if body.get(name) is not None:
            chat[name] = body[name]
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str):
        messages.append({"role": "system", "content": instructions})
    value = body.get("input")
    if isinstance(value, str):
        messages.append({"role": "user", "content": value})
    elif isinstance(value, list):
        messages.extend(input_to_messages(value))
    chat["messages"] = messages
    if body.get("tools") is not None:
        with translating("tools"):
            tools = list(enumerate(body["tools"]))
        chat["tools"] = [
            chat_tool for i, tool in tools for chat_tool in _tools_to_chat(tool, f"tools[{i}]")
        ]
    if body.get("tool_choice") is not None:
        with translating("tool_choice"):
            chat["tool_choice"] = _tool_choice_to_chat(body["tool_choice"])
    with translating("text"):
        _text_to_chat(body.get("text"), chat)
    reasoning = body.get("reasoning")
    if isinstance(reasoning, Mapping) and reasoning.get("effort") is not None:
        chat["reasoning_effort"] = reasoning["effort"]
    if body.get("max_output_tokens") is not None:
        chat[max_tokens_field] = body["max_output_tokens"]
    include = body.get("include")
    include = include if isinstance(include, list) else ()
    if body.get("top_logprobs") is not None or LOGPROBS_INCLUDE in include:
        chat["logprobs"] = True
        if body.get("top_logprobs") is not None:
            chat["top_logprobs"] = body["top_logprobs"]
    if chat.get("stream") is True:
        chat["stream_options"] = {"include_usage": True}
    for name, field_value in body.items():
        if name not in _RESPONSES_HANDLED and name not in chat:
            chat[name] = field_value
    return chat


def input_to_messages(items: list[Any]) -> list[dict[str, Any]]:
    """Responses input items as chat messages (see the module docstring)."""
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        param = f"input[{index}]"
        with translating(param):
            _item_to_messages(item, param, messages)
    return messages


def _item_to_messages(item: Any, param: str, messages: list[dict[str, Any]]) -> None:
    """Appends what one input item stands for to ``messages``."""
    kind = item.get("type") or ("message" if "role" in item else None)
    if kind == "message":
        role = item["role"]
        if role == "assistant":
            messages.append(_assistant_message(item.get("content"), param))
        else:
            content = _content_to_chat(item.get("content"), f"{param}.content")
            messages.append({"role": role, "content": content})
    elif kind == "function_call":
        call = {
            "id": item["call_id"],
            "type": "function",
            "function": {
                "name": flat_name(item.get("namespace"), item["name"]),
                "arguments": item["arguments"],
            },
        }
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant":
            last.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        output = _tool_output_to_chat(item.get("output"), f"{param}.output")
        if responses.is_named_output(item):
            # No call of the model's to answer: a chat tool message needs one.
            messages.append({"role": "user", "content": output})
        else:
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": output})
    elif kind == "reasoning":
        return
    elif kind == "item_reference":
        raise _refuse(
            f"{param}.type",
            "an item_reference must be expanded before the request is translated",
        )
    else:
        raise _refuse(
            f"{param}.type", f"input items of type '{kind}' have no Chat Completions form"
        )


def _assistant_message(content: Any, param: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant"}
    if isinstance(content, str) or content is None:
        message["content"] = content
        return message
    parts: list[dict[str, Any]] = []
    refusals: list[str] = []
    for index, part in enumerate(content):
        kind = part.get("type")
        if kind in ("output_text", "input_text"):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "refusal":
            refusals.append(part["refusal"])
        else:
            raise _refuse(
                f"{param}.content[{index}].type",
                f"an assistant content part of type '{kind}' has no Chat Completions form",
            )
    message["content"] = parts if parts else None
    if refusals:
        message["refusal"] = "".join(refusals)
    return message


def _content_to_chat(content: Any, param: str) -> Any:
    if not isinstance(content, list):
        return content
    return [_part_to_chat(part, f"{param}[{index}]") for index, part in enumerate(content)]


def _part_to_chat(part: Mapping[str, Any], param: str) -> dict[str, Any]:
    kind = part.get("type")
    if kind in ("input_text", "output_text"):
        return {"type": "text", "text": part["text"]}
    if kind == "input_image":
        if not isinstance(part.get("image_url"), str):
            raise _refuse(
                f"{param}.file_id", "an image given by file_id has no Chat Completions form"
            )
        image: dict[str, Any] = {"url": part["image_url"]}
        if part.get("detail") is not None:
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":
        if part.get("file_url") is not None:
            raise _refuse(
                f"{param}.file_url", "a file given by file_url has no Chat Completions form"
            )
        file = {
            name: part[name]
            for name in ("file_id", "file_data", "filename")
            if part.get(name) is not None
        }
        return {"type": "file", "file": file}
    if kind == "input_audio":
        return {"type": "input_audio", "input_audio": dict(part["input_audio"])}
    raise _refuse(f"{param}.type", f"content parts of type '{kind}' have no Chat Completions form")


def _tool_output_to_chat(output: Any, param: str) -> Any:
    if isinstance(output, str):
        return output
    parts: list[dict[str, Any]] = []
    for index, part in enumerate(output or ()):
        if not isinstance(part, Mapping) or part.get("type") != "input_text":
            raise _refuse(
                f"{param}[{index}].type", "a Chat Completions tool message carries text only"
            )
        parts.append({"type": "text", "text": part["text"]})
    return parts


def flat_name(namespace: Any, name: str) -> str:
    """A namespaced function's chat name (chat has no namespaces): ``ns__name``."""
    return f"{namespace}{NAMESPACE_JOIN}{name}" if isinstance(namespace, str) else name


def namespaced_names(request: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Each function of the request's ``namespace`` tools by its chat name: (namespace,
    name), to give an answer's calls back their namespace."""
    names: dict[str, tuple[str, str]] = {}
    tools = request.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, Mapping) or tool.get("type") != "namespace":
            continue
        namespace = tool.get("name")
        for inner in tool.get("tools") or ():
            if isinstance(namespace, str) and isinstance(inner, Mapping):
                name = inner.get("name")
                if isinstance(name, str):
                    names[flat_name(namespace, name)] = (namespace, name)
    return names


def _named_call(name: str, namespaces: Mapping[str, tuple[str, str]]) -> dict[str, str]:
    """A chat call's name as a function_call item's ``name`` (and ``namespace``)."""
    if name in namespaces:
        namespace, inner = namespaces[name]
        return {"name": inner, "namespace": namespace}
    return {"name": name}


def _tools_to_chat(tool: Mapping[str, Any], param: str) -> list[dict[str, Any]]:
    """A function tool as one chat tool; a ``namespace`` tool (a group of functions, as
    Codex sends its sub-agent tools) as one per function, named ``ns__name``."""
    with translating(param):
        if tool.get("type") != "namespace":
            return [_function_tool_to_chat(tool, param)]
        inner = tool.get("tools")
        if not isinstance(inner, list):
            raise _refuse(f"{param}.tools", "a namespace tool needs a list of tools")
        return [
            _function_tool_to_chat(function, f"{param}.tools[{j}]", namespace=tool["name"])
            for j, function in enumerate(inner)
        ]


def _function_tool_to_chat(
    tool: Mapping[str, Any], param: str, namespace: str | None = None
) -> dict[str, Any]:
    kind = tool.get("type")
    if kind != "function":
        raise _refuse(
            f"{param}.type",
            f"the built-in tool '{kind}' cannot be sent to a Chat Completions upstream",
        )
    function: dict[str, Any] = {"name": flat_name(namespace, tool["name"])}
    for name in ("description", "parameters"):
        if tool.get(name) is not None:
            function[name] = tool[name]
    # Responses' function tools are strict unless they say otherwise; chat's are not.
    function["strict"] = tool.get("strict") is not False
    return {"type": "function", "function": function}


def _tool_choice_to_chat(choice: Any) -> Any:
    if isinstance(choice, str):
        return choice
    kind = choice.get("type")
    if kind == "function":
        name = flat_name(choice.get("namespace"), choice["name"])
        return {"type": "function", "function": {"name": name}}
    if kind == "allowed_tools":
        tools = []
        for index, tool in enumerate(choice.get("tools") or ()):
            if not isinstance(tool, Mapping) or tool.get("type") != "function":
                raise _refuse(
                    f"tool_choice.tools[{index}]",
                    "only function tools can be allowed on a Chat Completions upstream",
                )
            tools.append({"type": "function", "function": {"name": tool["name"]}})
        return {"type": "allowed_tools", "allowed_tools": {"mode": choice["mode"], "tools": tools}}
    raise _refuse("tool_choice.type", f"tool_choice '{kind}' has no Chat Completions form")


def _text_to_chat(text: Any, chat: dict[str, Any]) -> None:
    if not isinstance(text, Mapping):
        return
    if text.get("verbosity") is not None:
        chat["verbosity"] = text["verbosity"]
    form = text.get("format")
    if not isinstance(form, Mapping):
        return
    kind = form.get("type")
    if kind == "json_schema":
        schema = {"name": form["name"], "schema": form["schema"]}
        for name in ("description", "strict"):
            if form.get(name) is not None:
                schema[name] = form[name]
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}
    else:
        chat["response_format"] = {"type": kind}


# --- Chat -> Responses requests ---------------------------------------------------------


def chat_request_to_responses(body: Mapping[str, Any]) -> dict[str, Any]:
    """The Responses request that asks what the chat request ``body`` asks (``store``
    false: hasten keeps what it needs). Raises ``InvalidRequest`` for what the Responses
    API cannot express."""
    if body.get("n") not in (None, 1):
        raise _refuse("n", "the Responses API gives one answer per request")
    if body.get("stop") not in (None, [], ""):
        raise _refuse("stop", "the Responses API has no stop sequences")
    for name in ("frequency_penalty", "presence_penalty"):
        if body.get(name) not in (None, 0):
            raise _refuse(name, f"the Responses API has no {name}")
    if body.get("logit_bias"):
        raise _refuse("logit_bias", "the Responses API has no logit_bias")
    modalities = body.get("modalities")
    if body.get("audio") is not None or (modalities is not None and modalities != ["text"]):
        raise _refuse("modalities", "audio output cannot be translated to the Responses API")
    for name in ("web_search_options", "functions", "function_call"):
        if body.get(name) is not None:
            raise _refuse(name, f"'{name}' cannot be translated to the Responses API")
    request: dict[str, Any] = {}
    for name in _SAME_FIELDS:
        if body.get(name) is not None:
            request[name] = body[name]
    request["input"] = messages_to_input(body.get("messages") or [])
    if body.get("tools") is not None:
        tools = []
        for i, tool in enumerate(body["tools"]):
            with translating(f"tools[{i}]"):
                tools.append(_tool_from_chat(tool, f"tools[{i}]"))
        request["tools"] = tools
    if body.get("tool_choice") is not None:
        with translating("tool_choice"):
            request["tool_choice"] = _tool_choice_from_chat(body["tool_choice"])
    text: dict[str, Any] = {}
    form = body.get("response_format")
    if form is not None:
        with translating("response_format"):
            text["format"] = _format_from_chat(form)
    if body.get("verbosity") is not None:
        text["verbosity"] = body["verbosity"]
    if text:
        request["text"] = text
    if body.get("reasoning_effort") is not None:
        request["reasoning"] = {"effort": body["reasoning_effort"]}
    limit = body.get("max_completion_tokens")
    if limit is None:
        limit = body.get("max_tokens")
    if limit is not None:
        request["max_output_tokens"] = limit
    if body.get("logprobs") is True:
        request["include"] = [LOGPROBS_INCLUDE]
        if body.get("top_logprobs") is not None:
            request["top_logprobs"] = body["top_logprobs"]
    request["store"] = False
    for name, value in body.items():
        if name not in _CHAT_HANDLED and name not in request:
            request[name] = value
    return request


def messages_to_input(messages: list[Any]) -> list[dict[str, Any]]:
    """Chat messages as Responses input items (see the module docstring)."""
    items: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        param = f"messages[{index}]"
        with translating(param):
            _message_to_items(message, param, items)
    return items


def _message_to_items(message: Any, param: str, items: list[dict[str, Any]]) -> None:
    """Appends the input items one chat message stands for to ``items``."""
    role = message.get("role")
    if role == "assistant":
        items.extend(_assistant_items(message, param))
    elif role == "tool":
        output = message.get("content")
        if isinstance(output, list):
            output = [
                {"type": "input_text", "text": part.get("text", "")}
                for part in output
                if isinstance(part, Mapping)
            ]
        items.append(
            {
                "type": "function_call_output",
                "call_id": message.get("tool_call_id"),
                "output": output if output is not None else "",
            }
        )
    elif role in ("system", "developer", "user"):
        content = message.get("content")
        if isinstance(content, list):
            content = [
                _part_from_chat(part, f"{param}.content[{i}]") for i, part in enumerate(content)
            ]
        items.append({"type": "message", "role": role, "content": content})
    else:
        raise _refuse(f"{param}.role", f"messages of role '{role}' have no Responses form")


def _assistant_items(message: Mapping[str, Any], param: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    content = message.get("content")
    refusal = message.get("refusal")
    if isinstance(content, list):
        parts: list[dict[str, Any]] = []
        for index, part in enumerate(content):
            if part.get("type") == "refusal":
                parts.append({"type": "refusal", "refusal": part.get("refusal", "")})
            elif part.get("type") == "text":
                parts.append({"type": "output_text", "text": part["text"], "annotations": []})
            else:
                raise _refuse(
                    f"{param}.content[{index}].type",
                    "an assistant message carries text or a refusal only",
                )
        if refusal:
            parts.append({"type": "refusal", "refusal": refusal})
        items.append({"type": "message", "role": "assistant", "content": parts})
    elif content is not None or refusal:
        if refusal:
            parts = []
            if content:
                parts.append({"type": "output_text", "text": content, "annotations": []})
            parts.append({"type": "refusal", "refusal": refusal})
            items.append({"type": "message", "role": "assistant", "content": parts})
        else:
            items.append({"type": "message", "role": "assistant", "content": content})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        items.append(
            {
                "type": "function_call",
                "call_id": call.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments", ""),
            }
        )
    return items


def _part_from_chat(part: Mapping[str, Any], param: str) -> dict[str, Any]:
    kind = part.get("type")
    if kind == "text":
        return {"type": "input_text", "text": part["text"]}
    if kind == "image_url":
        image = part.get("image_url") or {}
        return {
            "type": "input_image",
            "image_url": image.get("url"),
            "detail": image.get("detail") or "auto",
        }
    if kind == "file":
        return {"type": "input_file", **dict(part.get("file") or {})}
    if kind == "input_audio":
        return {"type": "input_audio", "input_audio": dict(part.get("input_audio") or {})}
    raise _refuse(f"{param}.type", f"content parts of type '{kind}' have no Responses form")


def _tool_from_chat(tool: Mapping[str, Any], param: str) -> dict[str, Any]:
    if tool.get("type") != "function":
        raise _refuse(f"{param}.type", f"tools of type '{tool.get('type')}' have no Responses form")
    function = tool.get("function") or {}
    converted: dict[str, Any] = {"type": "function", "name": function.get("name")}
    for name in ("description", "parameters"):
        if function.get(name) is not None:
            converted[name] = function[name]
    converted["strict"] = function.get("strict") is True
    return converted


def _tool_choice_from_chat(choice: Any) -> Any:
    if isinstance(choice, str):
        return choice
    kind = choice.get("type")
    if kind == "function":
        return {"type": "function", "name": (choice.get("function") or {}).get("name")}
    if kind == "allowed_tools":
        allowed = choice.get("allowed_tools") or {}
        tools = [
            {"type": "function", "name": (tool.get("function") or {}).get("name")}
            for tool in allowed.get("tools") or ()
        ]
        return {"type": "allowed_tools", "mode": allowed.get("mode"), "tools": tools}
    raise _refuse("tool_choice.type", f"tool_choice '{kind}' has no Responses form")


def _format_from_chat(form: Mapping[str, Any]) -> dict[str, Any]:
    if form.get("type") == "json_schema":
        schema = form.get("json_schema") or {}
        converted = {
            "type": "json_schema",
            "name": schema.get("name"),
            "schema": schema.get("schema"),
        }
        for name in ("description", "strict"):
            if schema.get(name) is not None:
                converted[name] = schema[name]
        return converted
    return {"type": form.get("type")}


# --- chat answers as Responses answers --------------------------------------------------


def status_of(finish_reason: Any) -> tuple[str, str | None]:
    """(status, incomplete reason) of a response whose chat answer ended for ``finish_reason``."""
    if finish_reason == "length":
        return "incomplete", "max_output_tokens"
    if finish_reason == "content_filter":
        return "incomplete", "content_filter"
    return "completed", None


def chat_body_to_responses(
    chat: Mapping[str, Any], request: Mapping[str, Any], *, response_id: str, created_at: int
) -> dict[str, Any]:
    """The Response object for a whole chat completion (its first choice) answering the
    Responses ``request``. Raises ValueError for a body without the chat shape."""
    try:
        choice = chat["choices"][0]
        message = choice["message"]
        status, reason = status_of(choice.get("finish_reason"))
        item_status = "incomplete" if status == "incomplete" else "completed"
        output: list[dict[str, Any]] = []
        namespaces = namespaced_names(request)
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            output.append(_reasoning_item(response_id, len(output), reasoning))
        parts: list[dict[str, Any]] = []
        content = message.get("content")
        if isinstance(content, list):  # some servers answer with text parts
            content = "".join(str(part.get("text", "")) for part in content)
        if isinstance(content, str) and (content or not message.get("tool_calls")):
            part = _text_part(content)
            logprobs = (choice.get("logprobs") or {}).get("content")
            if logprobs:
                part["logprobs"] = [_logprob(entry) for entry in logprobs]
            parts.append(part)
        if message.get("refusal"):
            parts.append({"type": "refusal", "refusal": message["refusal"]})
        if parts:
            item_id = ids.item_id("msg", response_id, len(output))
            output.append(_message_item(item_id, parts, item_status))
        for call in message.get("tool_calls") or ():
            function = call["function"]
            output.append(
                {
                    "id": ids.item_id("fc", response_id, len(output)),
                    "type": "function_call",
                    "status": item_status,
                    "arguments": function.get("arguments") or "",
                    "call_id": call.get("id") or ids.call_id(response_id, len(output)),
                    **_named_call(function["name"], namespaces),
                }
            )
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ValueError("not a chat completion body") from exc
    return new_response(
        request,
        response_id=response_id,
        created_at=created_at,
        model=chat.get("model") if isinstance(chat.get("model"), str) else None,
        status=status,
        output=output,
        usage=from_chat(chat.get("usage")),
        incomplete_reason=reason,
    )


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_item(item_id: str, parts: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": parts,
    }


def _reasoning_item(response_id: str, index: int, text: str) -> dict[str, Any]:
    return {
        "id": ids.item_id("rs", response_id, index),
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }


def _logprob(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "token": entry.get("token", ""),
        "bytes": entry.get("bytes") or [],
        "logprob": entry.get("logprob", 0.0),
        "top_logprobs": [
            {
                "token": top.get("token", ""),
                "bytes": top.get("bytes") or [],
                "logprob": top.get("logprob", 0.0),
            }
            for top in entry.get("top_logprobs") or ()
        ],
    }


def chat_error_to_responses(status: int, body: bytes) -> bytes:
    """An upstream chat error as the Responses client's error: the same OpenAI shape, so
    a well-formed one passes as it is; anything else is wrapped in that shape."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return body
    text = body.decode("utf-8", "replace").strip()[:500] or f"upstream answered {status}"
    return responses.error_body(status, text, "upstream_error")


# --- chat streams as Responses streams --------------------------------------------------


class _Item:
    """One output item being streamed: a message, a reasoning item or a function call.

    Its texts grow as lists of pieces, joined into ``data`` by ``sync`` when it is read:
    adding to a string per delta would copy the whole text each time."""

    __slots__ = (
        "argument_pieces",
        "call_id",
        "data",
        "index",
        "is_open",
        "name",
        "pending",
        "pieces",
    )

    def __init__(self, index: int, data: dict[str, Any]) -> None:
        self.index = index
        self.data = data
        self.is_open = True
        self.call_id: str | None = None
        self.name: str | None = None
        self.pieces: list[list[str]] = []  # per content part
        self.argument_pieces: list[str] = []
        self.pending = ""

    def sync(self) -> dict[str, Any]:
        for part, pieces in zip(self.data.get("content") or (), self.pieces, strict=False):
            part["refusal" if part["type"] == "refusal" else "text"] = "".join(pieces)
        if self.data.get("type") == "function_call":
            self.data["arguments"] = "".join(self.argument_pieces)
        return self.data


class ChatToResponsesStream:
    """A chat completion stream, chunk by chunk, as the Responses event sequence.

    ``start()`` gives ``response.created`` and ``response.in_progress`` (send them at
    once); ``feed(chunk)`` the events one parsed chunk implies (it starts the stream itself
    if ``start`` was not called); ``finish()`` closes every open item and ends with
    ``response.completed`` or ``response.incomplete`` (call it when the upstream stream
    ended whole, ``[DONE]`` included); ``fail(message, code)`` ends a broken stream with
    ``response.failed``. Sequence numbers increase from 0 across all of them.
    """

    def __init__(
        self,
        request: Mapping[str, Any],
        *,
        response_id: str | None = None,
        created_at: int,
        model: str | None = None,
    ) -> None:
        self.request = request
        self.response_id = response_id if response_id is not None else ids.new_response_id()
        self.created_at = created_at
        self.model = model if model is not None else request.get("model")
        self._sequence = EventSequence()
        self._items: list[_Item] = []
        self._content: _Item | None = None  # the open message or reasoning item
        self._calls: dict[int, _Item] = {}  # chat tool call index -> its item
        self._namespaces = namespaced_names(request)
        self._finish_reason: str | None = None
        self._usage: Usage | None = None
        self._is_started = False
        self._is_ended = False

    # -- the public steps

    def start(self) -> list[dict[str, Any]]:
        if not self._is_started:
            self._is_started = True
            opening = self._response("in_progress")
            self._sequence.add(responses.CREATED, response=opening)
            self._sequence.add(responses.IN_PROGRESS, response=copy.deepcopy(opening))
        return self._sequence.take()

    def feed(self, chunk: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The events for one parsed ``chat.completion.chunk``; ValueError for a chunk
        without the chat shape, or after the stream ended."""
        if self._is_ended:
            raise ValueError("the stream has ended")
        events = self.start() if not self._is_started else []
        try:
            self._feed(chunk)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError("not a chat completion chunk") from exc
        return [*events, *self._sequence.take()]

    def finish(self) -> list[dict[str, Any]]:
        """Every open item closed, then ``response.completed`` (or ``.incomplete``)."""
        if self._is_ended:
            return []
        events = self.start() if not self._is_started else []
        status, reason = status_of(self._finish_reason)
        item_status = "incomplete" if status == "incomplete" else "completed"
        self._close_content(item_status)
        for item in self._items:
            if item.is_open:
                self._close_call(item, item_status)
        end = responses.COMPLETED if status == "completed" else responses.INCOMPLETE
        self._sequence.add(end, response=self._response(status, reason))
        self._is_ended = True
        return [*events, *self._sequence.take()]

    def fail(self, message: str, code: str = "server_error") -> list[dict[str, Any]]:
        """``response.failed`` with the output so far; nothing more follows."""
        if self._is_ended:
            return []
        events = self.start() if not self._is_started else []
        error = {"code": code, "message": message}
        self._sequence.add(responses.FAILED, response=self._response("failed", error=error))
        self._is_ended = True
        return [*events, *self._sequence.take()]

    # -- building

    def _response(
        self, status: str, reason: str | None = None, error: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        output = [copy.deepcopy(item.sync()) for item in self._items]
        return new_response(
            self.request,
            response_id=self.response_id,
            created_at=self.created_at,
            model=self.model if isinstance(self.model, str) else None,
            status=status,
            output=output,
            usage=self._usage if status != "in_progress" else None,
            error=error,
            incomplete_reason=reason,
        )

    def _feed(self, chunk: Mapping[str, Any]) -> None:
        model = chunk.get("model")
        if model and model != self.model and isinstance(model, str):
            self.model = model
        if chunk.get("usage") is not None:
            usage = from_chat(chunk["usage"])
            if usage is not None:
                self._usage = usage
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue  # one answer per response: n > 1 is refused on the way in
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if (
                len(delta) == 1
                and type(content) is str
                and not choice.get("logprobs")
                and not choice.get("finish_reason")
            ):
                if content:  # a plain text token: most chunks of most streams
                    self._text(content, [])
                continue
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self._reasoning(reasoning)
            if isinstance(content, str) and content:
                logprobs = (choice.get("logprobs") or {}).get("content") or []
                self._text(content, [_logprob(entry) for entry in logprobs])
            refusal = delta.get("refusal")
            if isinstance(refusal, str) and refusal:
                self._refusal(refusal)
            for call in delta.get("tool_calls") or ():
                self._call(call)
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]

    def _where(self, item: _Item, **more: Any) -> dict[str, Any]:
        return {"item_id": item.data["id"], "output_index": item.index, **more}

    def _open(self, data: dict[str, Any]) -> _Item:
        item = _Item(len(self._items), data)
        self._items.append(item)
        added = copy.deepcopy(data)
        self._sequence.add(responses.ITEM_ADDED, output_index=item.index, item=added)
        return item

    def _content_item(self, kind: str) -> _Item:
        item = self._content
        if item is not None and item.data["type"] == kind:
            return item
        self._close_content("completed")
        index = len(self._items)
        if kind == "message":
            data = _message_item(ids.item_id("msg", self.response_id, index), [], "in_progress")
        else:
            data = {
                "id": ids.item_id("rs", self.response_id, index),
                "type": "reasoning",
                "summary": [],
                "content": [],
            }
        self._content = self._open(data)
        return self._content

    def _part(self, item: _Item, kind: str) -> int:
        """The index of the item's open part of ``kind`` (a new one if its last part is
        another kind)."""
        parts: list[dict[str, Any]] = item.data["content"]
        if parts and parts[-1]["type"] == kind:
            return len(parts) - 1
        if kind == "output_text":
            part = _text_part("")
        elif kind == "refusal":
            part = {"type": "refusal", "refusal": ""}
        else:
            part = {"type": kind, "text": ""}
        parts.append(part)
        item.pieces.append([])
        where = self._where(item, content_index=len(parts) - 1)
        self._sequence.add(responses.PART_ADDED, **where, part=copy.deepcopy(part))
        return len(parts) - 1

    def _delta(self, item_kind: str, part_kind: str, event_kind: str, text: str) -> int:
        item = self._content_item(item_kind)
        index = self._part(item, part_kind)
        item.pieces[index].append(text)
        self._sequence.add(
            event_kind,
            item_id=item.data["id"],
            output_index=item.index,
            content_index=index,
            delta=text,
        )
        return index

    def _text(self, text: str, logprobs: list[dict[str, Any]]) -> None:
        index = self._delta("message", "output_text", responses.TEXT_DELTA, text)
        self._sequence.events[-1]["logprobs"] = logprobs
        if logprobs:
            assert self._content is not None
            self._content.data["content"][index]["logprobs"].extend(logprobs)

    def _refusal(self, text: str) -> None:
        self._delta("message", "refusal", responses.REFUSAL_DELTA, text)

    def _reasoning(self, text: str) -> None:
        self._delta("reasoning", "reasoning_text", responses.REASONING_DELTA, text)

    def _close_content(self, status: str) -> None:
        item = self._content
        if item is None:
            return
        self._content = None
        item.is_open = False
        item.sync()
        for index, part in enumerate(item.data["content"]):
            where = self._where(item, content_index=index)
            kind = part["type"]
            if kind == "output_text":
                self._sequence.add(
                    responses.TEXT_DONE, **where, text=part["text"], logprobs=part["logprobs"]
                )
            elif kind == "refusal":
                self._sequence.add(responses.REFUSAL_DONE, **where, refusal=part["refusal"])
            else:
                self._sequence.add(responses.REASONING_DONE, **where, text=part["text"])
            self._sequence.add(responses.PART_DONE, **where, part=copy.deepcopy(part))
        if item.data["type"] == "message":
            item.data["status"] = status
        self._sequence.add(
            responses.ITEM_DONE, output_index=item.index, item=copy.deepcopy(item.data)
        )

    def _call(self, delta: Mapping[str, Any]) -> None:
        position = delta.get("index", len(self._calls))
        item = self._calls.get(position)
        function = delta.get("function") or {}
        if item is None:
            self._close_content("completed")
            item = _Item(-1, {})
            self._calls[position] = item
        if item.call_id is None and delta.get("id"):
            item.call_id = delta["id"]
        if item.name is None and function.get("name"):
            item.name = function["name"]
        piece = function.get("arguments") or ""
        if not isinstance(piece, str):
            raise TypeError("arguments")
        if item.index < 0:
            item.pending += piece
            if item.name is None:
                return  # the item opens once its name is known
            index = len(self._items)
            call_id = item.call_id or ids.call_id(self.response_id, index)
            data = {
                "id": ids.item_id("fc", self.response_id, index),
                "type": "function_call",
                "status": "in_progress",
                "arguments": "",
                "call_id": call_id,
                **_named_call(item.name, self._namespaces),
            }
            opened = self._open(data)
            item.index, item.data = opened.index, opened.data
            self._items[item.index] = item
            piece, item.pending = item.pending, ""
        if piece:
            item.argument_pieces.append(piece)
            self._sequence.add(responses.ARGUMENTS_DELTA, **self._where(item), delta=piece)

    def _close_call(self, item: _Item, status: str) -> None:
        item.is_open = False
        item.data["status"] = status
        arguments = item.sync()["arguments"]
        where = self._where(item)
        self._sequence.add(responses.ARGUMENTS_DONE, **where, arguments=arguments)
        self._sequence.add(
            responses.ITEM_DONE, output_index=item.index, item=copy.deepcopy(item.data)
        )
