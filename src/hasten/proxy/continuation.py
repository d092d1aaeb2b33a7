"""How a broken stream is continued (pure decisions; ``hasten.proxy.resumer`` carries them out).

Two ways, tried in this order:
- *regenerate*: a deterministic request (temperature 0 or a seed) is asked again, as it was
  sent, of another deployment of the route (the same one again when it is the only one: a cut
  is often one connection's bad luck), and ``hasten.proxy.splice.Splice`` forwards only what
  comes after the delivered text;
- *prefill*: the delivered text is handed back as the start of the assistant's message, by the
  mechanism the upstream declares (``[upstreams.X] prefill``), and the upstream writes only the
  rest. Only for one choice of plain text (``n = 1``, no tool call delivered), and only on
  upstreams that declare a mechanism; ``max_tokens`` is left as it was (the upstream does not
  say how many tokens the delivered text was), so such an answer may run that much longer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hasten.apis.chat import CHAT
from hasten.routing.models import Route

REGENERATED = "regenerated"  # the same request on another deployment, spliced
PREFILLED = "prefilled"  # continued from the delivered text
FAILED = "failed"  # neither worked: the clean error event, as without resume
RESUME_OUTCOMES = (REGENERATED, PREFILLED, FAILED)
CONTINUE_FINAL_MESSAGE = "continue_final_message"
ASSISTANT_PREFIX = "assistant_prefix"


def is_deterministic(body: Mapping[str, Any]) -> bool:
    """Temperature 0 or a seed: asked again, the upstream gives the same answer."""
    temperature = body.get("temperature")
    seed = body.get("seed")
    is_seeded = isinstance(seed, int) and not isinstance(seed, bool)
    is_greedy = isinstance(temperature, int | float) and not isinstance(temperature, bool)
    return is_seeded or (is_greedy and temperature == 0)


def regenerate_excluded(route: Route, failed: frozenset[str]) -> frozenset[str]:
    """The deployments a regeneration must avoid: those that failed, unless none is left."""
    names = {d.upstream for d in route.deployments}
    return failed if names - failed else frozenset()


@dataclass(frozen=True, slots=True)
class PrefillTarget:
    """Where a prefill continuation may go, and the mechanism those deployments share."""

    mechanism: str
    excluded: frozenset[str]


def prefill_target(route: Route, failed: frozenset[str]) -> PrefillTarget | None:
    """The deployments of the first declared mechanism (not failed ones, if others can)."""
    able = [d.upstream for d in route.deployments if route.upstreams[d.upstream].prefill != "none"]
    if not able:
        return None
    preferred = [name for name in able if name not in failed] or able
    mechanism = route.upstreams[preferred[0]].prefill
    chosen = {name for name in preferred if route.upstreams[name].prefill == mechanism}
    names = frozenset(d.upstream for d in route.deployments)
    return PrefillTarget(mechanism, names - chosen)


def prefill_body(
    sent: Mapping[str, Any], endpoint: str, text: str, mechanism: str
) -> dict[str, Any] | None:
    """The request (as sent upstream) asking for what follows ``text``; None if it cannot."""
    num_choices = sent.get("n")
    if num_choices not in (None, 1):
        return None
    if endpoint != CHAT:
        prompt = sent.get("prompt")
        if not isinstance(prompt, str) or sent.get("echo") is True:
            return None
        return {**sent, "prompt": prompt + text}
    messages = sent.get("messages")
    if not isinstance(messages, list):
        return None
    prefix: dict[str, Any] = {"role": "assistant", "content": text}
    if mechanism == ASSISTANT_PREFIX:
        return {**sent, "messages": [*messages, {**prefix, "prefix": True}]}
    if mechanism == CONTINUE_FINAL_MESSAGE:
        return {
            **sent,
            "messages": [*messages, prefix],
            "continue_final_message": True,
            "add_generation_prompt": False,
        }
    return None
