"""What a report records about the run that made it, with every credential removed."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from hasten import __version__

SECRET_SETTINGS = frozenset({"api_key", "compare_api_key"})
URL_SETTINGS = frozenset({"base_url", "compare_url"})
SKIPPED_SETTINGS = frozenset({"func", "command"})
REDACTED = "(redacted)"


def public_url(url: str) -> str:
    """``url`` without user:password and without its query (which may carry a key)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def public_settings(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The command's settings as JSON-ready values: keys and header values redacted."""
    settings: dict[str, Any] = {}
    for name, value in sorted(arguments.items()):
        if name in SKIPPED_SETTINGS or callable(value):
            continue
        if name in SECRET_SETTINGS:
            settings[name] = None if value is None else REDACTED
        elif name in URL_SETTINGS and isinstance(value, str):
            settings[name] = public_url(value)
        elif name == "header":
            settings[name] = [f"{raw.partition(':')[0].strip()}: {REDACTED}" for raw in value]
        elif isinstance(value, Path):
            settings[name] = str(value)
        elif isinstance(value, list | tuple):
            settings[name] = [str(item) for item in value]
        else:
            settings[name] = value
    return settings


def run_context(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Settings plus the hasten version, the date and the client machine's CPU count."""
    return {
        "hasten_version": __version__,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "settings": public_settings(arguments),
    }
