"""The OpenAPI 3.1 document of what the gateway serves (``GET /openapi.json``).

It describes the fields the gateway itself validates (each API's ``check``); everything else
in a request body passes through to the upstream untouched, so request schemas allow
additional properties. Fuzzers (``tests/test_fuzz.py``, ``bench/reliability/fuzz.py``) generate
requests from it and check that no input makes the gateway answer 5xx on its own or
answer an error outside its API's shape (OpenAI's; Anthropic's under /v1/messages).
"""

from __future__ import annotations

from typing import Any

import orjson

from hasten import __version__

_STRING = {"type": "string"}
_INTEGER_1 = {"type": "integer", "minimum": 1}
_SAMPLING: dict[str, Any] = {
    "stream": {"type": "boolean"},
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "top_p": {"type": "number", "minimum": 0, "maximum": 1},
    "n": {"type": "integer", "minimum": 1, "maximum": 8},
    "max_tokens": {"type": "integer", "minimum": 1, "maximum": 4096},
    "max_completion_tokens": {"type": "integer", "minimum": 1, "maximum": 4096},
    "seed": {"type": "integer"},
    "stream_options": {
        "type": "object",
        "properties": {"include_usage": {"type": "boolean"}},
    },
    "stop": {"anyOf": [_STRING, {"type": "array", "items": _STRING, "maxItems": 4}]},
}
_MESSAGE = {
    "type": "object",
    "required": ["role", "content"],
    "properties": {
        "role": {"enum": ["system", "user", "assistant"]},
        "content": {"anyOf": [_STRING, {"type": "null"}]},
        "name": _STRING,
    },
}
_MODEL = {"type": "string", "minLength": 1}
CHAT_REQUEST: dict[str, Any] = {
    "type": "object",
    "required": ["model", "messages"],
    "properties": {
        "model": _MODEL,
        "messages": {"type": "array", "minItems": 1, "items": _MESSAGE},
        "tools": {"type": "array", "items": {"type": "object"}},
        **_SAMPLING,
    },
}
COMPLETION_REQUEST: dict[str, Any] = {
    "type": "object",
    "required": ["model", "prompt"],
    "properties": {
        "model": _MODEL,
        "prompt": {"anyOf": [_STRING, {"type": "array", "items": _STRING, "minItems": 1}]},
        **_SAMPLING,
    },
}
EMBEDDING_REQUEST: dict[str, Any] = {
    "type": "object",
    "required": ["model", "input"],
    "properties": {
        "model": _MODEL,
        "input": {"anyOf": [_STRING, {"type": "array", "items": _STRING, "minItems": 1}]},
    },
}
_RESPONSES_ITEM = {
    "type": "object",
    "properties": {
        "type": {"enum": ["message", "function_call", "function_call_output"]},
        "role": {"enum": ["user", "assistant", "system", "developer"]},
        "content": {"anyOf": [_STRING, {"type": "array", "items": {"type": "object"}}]},
    },
}
RESPONSES_REQUEST: dict[str, Any] = {
    "type": "object",
    "required": ["model", "input"],
    "properties": {
        "model": _MODEL,
        "input": {"anyOf": [_STRING, {"type": "array", "items": _RESPONSES_ITEM}]},
        "instructions": _STRING,
        "stream": {"type": "boolean"},
        "store": {"type": "boolean"},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "top_p": {"type": "number", "minimum": 0, "maximum": 1},
        "max_output_tokens": {"type": "integer", "minimum": 16, "maximum": 4096},
        "previous_response_id": _STRING,
        "tools": {"type": "array", "items": {"type": "object"}},
        "metadata": {"type": "object", "additionalProperties": _STRING},
    },
}
_MESSAGES_MESSAGE = {
    "type": "object",
    "required": ["role", "content"],
    "properties": {
        "role": {"enum": ["user", "assistant"]},
        "content": {"anyOf": [_STRING, {"type": "array", "items": {"type": "object"}}]},
    },
}
MESSAGES_REQUEST: dict[str, Any] = {
    "type": "object",
    "required": ["model", "max_tokens", "messages"],
    "properties": {
        "model": _MODEL,
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 4096},
        "messages": {"type": "array", "minItems": 1, "items": _MESSAGES_MESSAGE},
        "system": {"anyOf": [_STRING, {"type": "array", "items": {"type": "object"}}]},
        "stream": {"type": "boolean"},
        "temperature": {"type": "number", "minimum": 0, "maximum": 1},
        "stop_sequences": {"type": "array", "items": _STRING, "maxItems": 4},
        "tools": {"type": "array", "items": {"type": "object"}},
        "metadata": {"type": "object"},
    },
}
COUNT_TOKENS_REQUEST: dict[str, Any] = {
    "type": "object",
    "required": ["model", "messages"],
    "properties": {
        "model": _MODEL,
        "messages": {"type": "array", "minItems": 1, "items": _MESSAGES_MESSAGE},
        "system": {"anyOf": [_STRING, {"type": "array", "items": {"type": "object"}}]},
        "tools": {"type": "array", "items": {"type": "object"}},
    },
}
INVALIDATE_REQUEST: dict[str, Any] = {
    "type": "object",
    "properties": {
        "key": _STRING,
        "entry_id": {"type": "integer"},
        "model": _STRING,
        "older_than_s": {"type": "number", "minimum": 0},
    },
}
REPORT_REQUEST: dict[str, Any] = {
    "type": "object",
    "required": ["entry_id"],
    "properties": {"entry_id": {"type": "integer"}, "similarity": {"type": "number"}},
}
_KEY_LIMITS: dict[str, Any] = {
    "type": ["object", "null"],
    "properties": {
        "requests_per_minute": _INTEGER_1,
        "tokens_per_minute": _INTEGER_1,
        "max_concurrent": _INTEGER_1,
        "budget_usd": {"type": "number", "exclusiveMinimum": 0},
        "budget_period": {"type": "string", "examples": ["30d", "7d", "12h"]},
        "budget_period_s": {"type": "number", "minimum": 60},
    },
}
_KEY_FIELDS: dict[str, Any] = {
    "name": {"type": "string", "maxLength": 128},
    "models": {"type": ["array", "null"], "items": _MODEL, "minItems": 1, "maxItems": 256},
    "limits": _KEY_LIMITS,
}
KEY_CREATE_REQUEST: dict[str, Any] = {
    "type": "object",
    "required": ["tenant"],
    "properties": {"tenant": {"type": "string", "minLength": 1, "maxLength": 64}, **_KEY_FIELDS},
}
KEY_PATCH_REQUEST: dict[str, Any] = {
    "type": "object",
    "minProperties": 1,
    "properties": _KEY_FIELDS,
}
_KEY_ID = [{"name": "id", "in": "path", "required": True, "schema": _STRING}]
ERROR: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": _STRING,
                "type": _STRING,
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}


ANTHROPIC_ERROR: dict[str, Any] = {
    "type": "object",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {"type": _STRING, "message": _STRING},
        },
    },
}


def _responses(*, is_streamable: bool = False, error: str = "Error") -> dict[str, Any]:
    ok: dict[str, Any] = {"application/json": {"schema": {"type": "object"}}}
    if is_streamable:
        ok["text/event-stream"] = {"schema": {"type": "string"}}
    shape = "Anthropic's" if error == "AnthropicError" else "the OpenAI"
    return {
        "200": {"description": "OK", "content": ok},
        "default": {
            "description": f"An error, always in {shape} shape",
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{error}"}}},
        },
    }


def _post(
    summary: str, schema: dict[str, Any], *, is_streamable: bool = False, error: str = "Error"
) -> dict[str, Any]:
    return {
        "post": {
            "summary": summary,
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": schema}},
            },
            "responses": _responses(is_streamable=is_streamable, error=error),
        }
    }


def _get(summary: str) -> dict[str, Any]:
    return {"get": {"summary": summary, "responses": _responses()}}


def _key_paths() -> dict[str, Any]:
    """``/admin/keys`` (hasten.admin.keys): virtual keys, with the admin key."""
    one = {
        "parameters": _KEY_ID,
        **_get("A virtual key (never its secret)"),
        "patch": _post("Change a key's name, models or limits", KEY_PATCH_REQUEST)["post"],
        "delete": {"summary": "Revoke a key", "responses": _responses()},
    }
    rotate = {
        "parameters": _KEY_ID,
        "post": {"summary": "Rotate a key's secret", "responses": _responses()},
    }
    return {
        "/admin/keys": {
            **_get("Virtual keys (no secrets)"),
            **_post("Create a virtual key (201, its secret shown once)", KEY_CREATE_REQUEST),
        },
        "/admin/keys/{id}": one,
        "/admin/keys/{id}/rotate": rotate,
    }


def _response_paths() -> dict[str, Any]:
    """The Responses API's stored responses (``hasten.responses.endpoints``)."""
    response_id = [{"name": "id", "in": "path", "required": True, "schema": _STRING}]
    listing = [
        *response_id,
        {"name": "limit", "in": "query", "schema": {"type": "integer"}},
        {"name": "order", "in": "query", "schema": _STRING},
        {"name": "after", "in": "query", "schema": _STRING},
    ]
    return {
        "/v1/responses/{id}": {
            "parameters": response_id,
            **_get("A stored response"),
            "delete": {"summary": "Delete a stored response", "responses": _responses()},
        },
        "/v1/responses/{id}/input_items": {
            "parameters": listing,
            **_get("A stored response's input items"),
        },
        "/v1/responses/{id}/cancel": {
            "parameters": response_id,
            "post": {
                "summary": "Cancel a background response (400: not supported by hasten)",
                "responses": _responses(),
            },
        },
    }


def build_document() -> dict[str, Any]:
    """The document as a dict (``openapi_json`` serialises it once at startup)."""
    import_body = {"text/plain": {"schema": {"type": "string"}}}  # JSONL lines
    return {
        "openapi": "3.1.0",
        "info": {"title": "hasten gateway", "version": __version__},
        "components": {
            "schemas": {"Error": ERROR, "AnthropicError": ANTHROPIC_ERROR},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
        "paths": {
            "/v1/chat/completions": _post("Chat completion", CHAT_REQUEST, is_streamable=True),
            "/v1/completions": _post("Text completion", COMPLETION_REQUEST, is_streamable=True),
            "/v1/embeddings": _post("Embeddings", EMBEDDING_REQUEST),
            "/v1/responses": _post("OpenAI Responses", RESPONSES_REQUEST, is_streamable=True),
            "/v1/messages": _post(
                "Anthropic Messages", MESSAGES_REQUEST, is_streamable=True, error="AnthropicError"
            ),
            "/v1/messages/count_tokens": _post(
                "Anthropic token count", COUNT_TOKENS_REQUEST, error="AnthropicError"
            ),
            "/v1/models": _get("Models and aliases"),
            "/healthz": _get("Liveness"),
            "/readyz": _get("Readiness"),
            "/stats": _get("Counters"),
            "/admin/routing": _get("Routing state"),
            "/admin/cache/stats": _get("Cache statistics"),
            "/admin/cache/invalidate": _post("Invalidate cached answers", INVALIDATE_REQUEST),
            "/admin/cache/report": _post("Report a wrong semantic hit", REPORT_REQUEST),
            "/admin/cache/import": {
                "post": {
                    "summary": "Warm the cache from JSONL",
                    "requestBody": {"required": True, "content": import_body},
                    "responses": _responses(),
                }
            },
            **_key_paths(),
            **_response_paths(),
            "/openapi.json": _get("This document"),
        },
    }


def openapi_json() -> bytes:
    return orjson.dumps(build_document())
