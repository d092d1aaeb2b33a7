"""hasten: make LLM applications answer faster."""

from __future__ import annotations

__version__ = "0.1.0"
