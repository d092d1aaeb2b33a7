"""``[hybrid]``: when a request counts as hard, and what each policy does with it
(``hasten.routing.hybrid`` decides per request)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hasten.config.reader import TomlTable

POLICIES = ("local-first", "cloud-first", "local-only", "cloud-only")


@dataclass(frozen=True, slots=True)
class HybridConfig:
    """When a request counts as hard, and what each policy does with it."""

    model: str = "auto"  # the name clients ask for to get hybrid routing
    policy: str = "local-first"
    cloud_model: str = ""  # a configured model route; its name is what both sides receive
    max_local_prompt_tokens: int = 1500
    max_local_output_tokens: int = 512
    max_local_turns: int = 8
    max_complexity: float = 0.3
    cloud_first_token_timeout_s: float = 3.0


def parse_hybrid(table: TomlTable, *, known_models: Mapping[str, Any]) -> HybridConfig:
    """Reads ``[hybrid]``; the cloud side must name a configured model route."""
    d = HybridConfig()
    config = HybridConfig(
        model=table.string("model", d.model),
        policy=table.choice("policy", d.policy, POLICIES),
        cloud_model=table.string("cloud_model", d.cloud_model),
        max_local_prompt_tokens=_positive(
            table, "max_local_prompt_tokens", d.max_local_prompt_tokens
        ),
        max_local_output_tokens=_positive(
            table, "max_local_output_tokens", d.max_local_output_tokens
        ),
        max_local_turns=_positive(table, "max_local_turns", d.max_local_turns),
        max_complexity=_positive(table, "max_complexity", d.max_complexity),
        cloud_first_token_timeout_s=_positive(
            table, "cloud_first_token_timeout_s", d.cloud_first_token_timeout_s
        ),
    )
    table.finish()
    if config.policy != "local-only":
        if not config.cloud_model:
            raise table.error("cloud_model", f"required for policy {config.policy!r}")
        if config.cloud_model not in known_models and "*" not in known_models:
            raise table.error("cloud_model", f"unknown model {config.cloud_model!r}")
    if config.model in known_models:
        raise table.error("model", f"{config.model!r} is also a [models] route")
    return config


def _positive(table: TomlTable, key: str, default: float) -> Any:
    """A number > 0, kept as written: the token limits have always taken a float too."""
    value = table.get(key, (int, float), default)
    if value <= 0:
        raise table.error(key, f"expected a number > 0, got {value!r}")
    return value
