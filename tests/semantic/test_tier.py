"""What a semantic hit tells the client: similarity, entry, calibrated risk."""

from __future__ import annotations

from hasten.cache import CachedAnswer
from hasten.semantic.matcher import SemanticMatch
from hasten.semantic.tier import SemanticHit

ENTRY = CachedAnswer("json", "chat", 0.0, 60.0, body=b"{}")


def test_a_cosine_hit_names_similarity_and_entry_only() -> None:
    headers = dict(SemanticHit(ENTRY, SemanticMatch(7, 0.97123, "k")).headers())
    assert headers == {
        b"x-hasten-semantic-similarity": b"0.9712",
        b"x-hasten-semantic-entry": b"7",
    }


def test_a_calibrated_hit_adds_its_risk() -> None:
    match = SemanticMatch(7, 0.93, "k", risk=0.0312, script="latin")
    headers = dict(SemanticHit(ENTRY, match).headers())
    assert headers[b"x-hasten-semantic-risk"] == b"0.0312" and len(headers) == 3
