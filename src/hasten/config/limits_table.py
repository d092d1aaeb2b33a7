"""``[limits]``: what a limited key's request reserves when it does not say (docs/limits.md).

::

    [limits]
    default_max_output_tokens = 4096   # reserved for a request without max_tokens
"""

from __future__ import annotations

from dataclasses import dataclass

from hasten.config.reader import TomlTable

# A request that names no most output tokens (max_tokens, max_completion_tokens,
# max_output_tokens) reserves this many: a long answer, not a model's most (which would lock
# a small key out of every request); its usage corrects it.
DEFAULT_MAX_OUTPUT_TOKENS = 4096


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    default_max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS


def parse_limits(table: TomlTable) -> LimitsConfig:
    config = LimitsConfig(
        default_max_output_tokens=table.integer(
            "default_max_output_tokens", DEFAULT_MAX_OUTPUT_TOKENS, minimum=1
        )
    )
    table.finish()
    return config
