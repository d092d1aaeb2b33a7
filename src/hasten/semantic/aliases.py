"""Verified aliases: a judged near miss whose fresh answer agreed becomes a way to its entry.

A near miss judged "yes" (``judge``) is still only a guess. The miss went upstream anyway,
so once its fresh answer is stored the gateway holds both answers: only when the cached one
agrees with it (``judge_rules.answers_agree``) is the asked question stored as an alias of
the entry: a row of its own (its text and vector, in its own partition, so its own tenant's)
that serves the entry's answer, in the entry's answer class, flagged ``alias_of``. The next
lookup of that question, or of one the calibrated matcher finds close enough to it, is then
served the entry's answer (``x-hasten-semantic-verifier: alias``). An alias never outlives
its entry: it expires no later, and goes whenever the entry is removed (``upkeep``).

Without a yes and an agreement the asked question is stored as an entry of its own, as any
miss is; nothing is ever served on the judge's word alone. The price: a judged question
becomes searchable only once its verdict is in (at most the judge's ``timeout_s`` later;
an exact repeat of the request is an exact-cache hit meanwhile).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from hasten.semantic.judge_rules import answers_agree, normalized_answer

if TYPE_CHECKING:
    from hasten.semantic.judge import AsyncJudge, Ticket
    from hasten.semantic.store import SemanticCache

# Two answers' texts by their exact-cache keys (cached, fresh); None when either is gone.
Texts = Callable[[str, str], Awaitable[tuple[str, str] | None]]
# The answers' embedding cosine, computed only when their texts differ.
Cosine = Callable[[str, str], Awaitable[float]]
# Answer cosine at which two differing answers agree. bench/semantic_live.py measured joins
# of answer classes on answer agreement alone (gptcache_mock_pairs clusters): at 0.95 +19
# correct and +21 wrong, at 0.98 +5 / +7; so the cosine is weak evidence and only a high
# one counts, and only after the judge said yes (two independent keys).
DEFAULT_ANSWER_SIMILARITY = 0.98


async def settle(
    judge: AsyncJudge,
    cache: SemanticCache,
    ticket: Ticket,
    fresh_key: str,
    *,
    texts: Texts,
    cosine: Cosine,
    ttl_s: float,
    min_cosine: float = DEFAULT_ANSWER_SIMILARITY,
) -> bool:
    """Waits for ``ticket``'s verdict; on yes compares the answers and, when they agree,
    stores the alias. Whether an alias was made (else the caller stores an entry)."""
    case = ticket.case
    counts = judge.counts[case.script]
    if await judge.wait(ticket) is not True:
        return False
    found = await texts(case.answer_key, fresh_key)
    if found is None:
        counts["alias_unchecked"] += 1
        return False
    cached, fresh = found
    similarity = None  # embedded only when the texts differ and a cosine may count
    if normalized_answer(cached) != normalized_answer(fresh) and min_cosine <= 1.0:
        similarity = await cosine(cached, fresh)
    if not answers_agree(cached, fresh, similarity, min_cosine):
        counts["judge_disagreed"] += 1
        return False
    counts["judge_agreed"] += 1
    if await cache.add_alias(case, ttl_s=ttl_s) is None:
        return False
    counts["aliases_made"] += 1
    return True
