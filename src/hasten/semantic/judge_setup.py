"""Builds the ``[semantic] judge`` a gateway's semantic tier runs with (``judge``).

Separate from ``app``'s tier setup because the upstream judge needs the gateway's router
and upstream client, which exist only once the gateway is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hasten.semantic.judge import AsyncJudge, JudgeBackend, VerifierJudge
from hasten.semantic.judge_rules import SpendPolicy
from hasten.semantic.judge_upstream import UpstreamJudge, gateway_send

if TYPE_CHECKING:
    from hasten.config.semantic import SemanticConfig
    from hasten.routing.models import ModelRouter
    from hasten.semantic.tier import SemanticTier
    from hasten.upstream.client import UpstreamClient


def attach_judge(
    tier: SemanticTier, settings: SemanticConfig, router: ModelRouter, client: UpstreamClient
) -> None:
    """Gives ``tier`` its judge (nothing with ``judge = "off"``)."""
    backend: JudgeBackend
    if settings.judge == "off":
        return
    if settings.judge == "upstream":
        backend = UpstreamJudge(gateway_send(router, client), model=settings.judge_model)
    else:
        from hasten.semantic.verifier import UseVerifier  # the semantic-verify extra

        verifier = tier.cache.verifier or UseVerifier()
        backend = VerifierJudge(verifier, tier.cache.on_worker)
    policy = SpendPolicy(settings.judge_max_per_minute, settings.judge_max_tokens_per_minute)
    tier.judge = AsyncJudge(
        backend,
        policy,
        counts=tier.cache.judge_counts,
        max_queued=settings.judge_max_queued,
        timeout_s=settings.judge_timeout_s,
    )
    tier.judge_band = settings.judge_band
    tier.alias_answer_similarity = settings.judge_answer_similarity
