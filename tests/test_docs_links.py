"""Every relative link in README.md, docs/ and bench/ names a file that exists, and an
anchor (``#section``) names a heading of that file, as GitHub spells its anchors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _is_ours(page: Path) -> bool:
    """Not in a folder a bench installs other projects into (bench/.venvs, .npm's
    node_modules: ignored by git)."""
    parts = page.relative_to(ROOT).parts
    return not any(part.startswith(".") or part == "node_modules" for part in parts)


PAGES = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *filter(_is_ours, (ROOT / "bench").rglob("README.md")),
    ]
)
# [text](target) outside code spans; images too. Absolute URLs are not checked (no network).
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def anchor_of(heading: str) -> str:
    """GitHub's anchor: lower case, punctuation other than '-' and '_' dropped, spaces as '-'."""
    text = CODE_SPAN.sub(lambda m: m.group(0).strip("`"), heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    found = set()
    for line in text.splitlines():
        if line.startswith("#"):
            base = anchor_of(line.lstrip("#"))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    text = CODE_SPAN.sub("", FENCE.sub("", page.read_text(encoding="utf-8")))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def test_anchor_of_follows_github() -> None:
    assert anchor_of("Fleet: 3 replicas behind nginx") == "fleet-3-replicas-behind-nginx"
    assert anchor_of("Parameter policies: `max_tokens` cap") == "parameter-policies-max_tokens-cap"
    assert anchor_of("Deployments, hedging and breakers") == "deployments-hedging-and-breakers"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in links(page):
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in anchors(dest)):
            broken.append(target)
    assert broken == []
