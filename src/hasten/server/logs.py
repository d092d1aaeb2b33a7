"""Log output for ``hasten serve``: one line per record, whatever a client put in it.

Messages carry client-controlled text (model names, header values, error details from
upstreams). In the human format every control character in a message is escaped, so a
``model`` holding a newline and a fake record stays on its own line; continuation lines
(tracebacks) are indented, so nothing can start a line that passes for a record. The JSON
format (``--log-format json``) writes one object per line, which escapes by construction.
"""

from __future__ import annotations

import logging
import sys
import time
from types import MappingProxyType
from typing import Any

import orjson

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Request fields a record may carry (``extra=``); JSON lines show them as their own keys.
RECORD_FIELDS = (
    "request_id",
    "method",
    "path",
    "status",
    "tenant",
    "model",
    "cache",
    "upstream",
    "policy",  # x-hasten-policy: what a parameter policy changed (hasten.policy)
    "duration_ms",
    "timing",  # Server-Timing: time in the gateway and to the upstream's first byte
)
_CONTINUATION_INDENT = "    "

_CONTROL_ESCAPES = MappingProxyType(
    {
        **{code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))},
        0x09: "\\t",
        0x0A: "\\n",
        0x0D: "\\r",
        0x2028: "\\u2028",  # line and paragraph separators: new lines to some viewers
        0x2029: "\\u2029",
    }
)
_CONTROL_ESCAPES_BUT_NEWLINE = MappingProxyType(
    {code: text for code, text in _CONTROL_ESCAPES.items() if code != 0x0A}
)


def escape(text: str) -> str:
    """``text`` on one line: control characters as backslash escapes."""
    return text.translate(_CONTROL_ESCAPES)


class TextFormatter(logging.Formatter):
    """The human format, with client-controlled text unable to forge a line."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        return _continuation(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _continuation(super().formatStack(stack_info))


def _continuation(text: str) -> str:
    """A multi-line block under its record: escaped, and every line indented."""
    escaped = text.translate(_CONTROL_ESCAPES_BUT_NEWLINE)
    return _CONTINUATION_INDENT + escaped.replace("\n", "\n" + _CONTINUATION_INDENT)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and any request fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _iso_time(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": _text(record.getMessage()),
        }
        for name in RECORD_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = _text(value) if isinstance(value, str) else value
        if record.exc_info:
            entry["exception"] = _text(self.formatException(record.exc_info))
        if record.stack_info:
            entry["stack"] = _text(self.formatStack(record.stack_info))
        return orjson.dumps(entry, default=str).decode()


def _text(value: str) -> str:
    # Lone surrogates (bytes decoded with surrogateescape) are not valid JSON text.
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


def _iso_time(created_s: float) -> str:
    millis = int(created_s * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created_s)) + f".{millis:03d}Z"


def configure(level: str, log_format: str) -> None:
    """Sends every record to stderr in ``log_format`` (``text`` or ``json``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
