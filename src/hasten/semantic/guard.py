"""Near-miss guard: two questions that embed close together but differ in what decides the answer.

Embeddings place "learn Python in 3 months" and "learn Java in 6 months" next to each other;
the guard vetoes such a candidate when the two texts disagree on numbers, dates, units,
negation, opposites ("turn on" / "turn off", "buy" / "sell"), named entities, quoted
strings, code identifiers, language, or only in whitespace where whitespace can be meaning
(code's indentation, quoted text). It is pure and
deterministic: a :class:`TextSignature` is computed once per text (stored with cache entries)
and two signatures are compared in a few microseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hasten.semantic import lexicon, polarity
from hasten.semantic.partition import trimmed

# Reasons, in the order they are checked (cheapest and most decisive first).
LANGUAGE = "language"
NEGATION = "negation"
POLARITY = "polarity"
NUMBERS = "numbers"
DATES = "dates"
UNITS = "units"
QUOTED = "quoted"
CODE = "code"
ENTITIES = "entities"
SPACING = "spacing"
REASONS = (LANGUAGE, NEGATION, POLARITY, NUMBERS, UNITS, QUOTED, DATES, CODE, ENTITIES, SPACING)

_QUOTED = re.compile(
    r"\"([^\"]{1,200})\"|“([^”]{1,200})”|`([^`]{1,200})`|「([^」]{1,200})」|『([^』]{1,200})』"
    r"|《([^》]{1,200})》|‘([^’]{1,200})’|(?:^|(?<=[\s(]))'([^']{1,200})'(?=[\s.,;:!?)]|$)"
)
_LATIN_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_.+#'’-]*[A-Za-z0-9_+#]|[A-Za-z]")
_CODE_TOKEN = re.compile(
    r"(?<!\S)--?[a-z][a-z0-9-]+"  # command-line flags
    r"|(?<![\w.])(?:[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?:\(\))?"  # dotted.names
    r"|[A-Za-z_][A-Za-z0-9_]*\(\)"  # call()
    r"|[A-Za-z]*_[A-Za-z0-9_]+"  # snake_case
    r"|[a-z]+[A-Z][A-Za-z0-9]*)"  # camelCase
)
_DIGITS = re.compile(r"(?<![A-Za-z0-9_.])[-+]?\d+(?:[,.]\d+)*(?:\.\d+)?")
_HAN_NUMERAL = re.compile(r"[零〇一二两三四五六七八九十百千万亿]+")
_SENTENCE_END = re.compile(r"[.!?。！？:;](?:\s+|$)")
_SQUASHED_OUT = re.compile(r"[\s\-]+")
_MYRIADS = {"万": 10_000, "亿": 100_000_000}  # "39.5万" = 395,000
# Full-width ASCII forms and the ideographic space read as ASCII ("３６１，４００" = 361400).
# Not NFKC: it also reads "10²" as "102" and "½" as "1⁄2", which are other numbers.
_HALF_WIDTH = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)} | {0x3000: ord(" ")}
# Characters near which whitespace can be meaning: lines (code's indentation) and quotes.
_LAYOUT_CHARS = frozenset("\n\"'`“”‘’「」『』《》")
# Shorter entities are too often part of unrelated words to be found by substring.
_MIN_CONTAINED_ENTITY_CHARS = 4


@dataclass(frozen=True, slots=True)
class TextSignature:
    """What decides the answer to a question, extracted once per text."""

    language: str
    is_negated: bool
    polarity: frozenset[str]
    numbers: frozenset[str]
    dates: frozenset[str]
    units: frozenset[str]
    quantities: frozenset[str]
    quoted: frozenset[str]
    quoted_spans: frozenset[tuple[str, str]]  # (squashed, as written)
    code: frozenset[str]
    entities: frozenset[str]
    words: frozenset[str]
    # Lower-cased text without whitespace or hyphens: a quoted span, identifier or entity of
    # the other text found in it is mentioned here too, only spaced, cased or quoted otherwise.
    squashed: str
    # The text as given (``partition.trimmed``): equal texts are the same question asked again.
    text: str = ""
    # The text without whitespace, and whether its whitespace can be meaning (``SPACING``).
    unspaced: str = ""
    has_layout: bool = False


def signature(text: str) -> TextSignature:
    """The decisive features of ``text``."""
    given = trimmed(text)  # as a repeat is told apart (the store's texts are so already)
    text = text.translate(_HALF_WIDTH)
    spans = _quoted_spans(text)
    quoted = frozenset(_squash(span) for span in spans)
    code = frozenset(_squash(m.group(0).rstrip(".")) for m in _CODE_TOKEN.finditer(text))
    lowered = text.lower()
    words = [w.strip("'’.-").lower() for w in _LATIN_WORD.findall(text)]
    numbers, quantities = _numbers_and_quantities(lowered)
    entities = frozenset(_entities(text))
    return TextSignature(
        language=lexicon.language_of(lowered, words),
        is_negated=lexicon.is_negated(lowered, words),
        polarity=polarity.polarity_sides(lowered),
        numbers=frozenset(numbers),
        dates=frozenset(lexicon.date_words(lowered, words)),
        units=frozenset(lexicon.unit_words(lowered, words))
        | {q.split(" ", 1)[1] for q in quantities},
        quantities=frozenset(quantities),
        quoted=quoted,
        quoted_spans=frozenset((_squash(span), span) for span in spans),
        code=code,
        entities=entities,
        # An entity always counts as mentioned by its own text, whatever the tokenisation.
        words=frozenset(_stem(part) for w in words for part in {w, *w.split(".")}) | entities,
        squashed=_squash(text),
        text=given,
        unspaced="".join(given.split()),
        has_layout=not _LAYOUT_CHARS.isdisjoint(given),
    )


def compare(first: TextSignature, second: TextSignature) -> str | None:
    """Symmetric: the first decisive difference between two signatures, or None."""
    if first.language != second.language:
        return LANGUAGE
    if first.is_negated != second.is_negated:
        return NEGATION
    if polarity.has_polarity_flip(first.polarity, second.polarity):
        return POLARITY
    if first.numbers != second.numbers:
        return NUMBERS
    if _is_contradiction(first.units, second.units) or _has_unit_swap(first, second):
        return UNITS
    if not _is_mentioned(first.quoted, second) or not _is_mentioned(second.quoted, first):
        return QUOTED
    if _is_requoted(first, second) or _is_requoted(second, first):
        return QUOTED
    if _is_contradiction(first.dates, second.dates):
        return DATES
    if not _is_mentioned(first.code, second) or not _is_mentioned(second.code, first):
        return CODE
    if _has_unmentioned(first.entities, second) or _has_unmentioned(second.entities, first):
        return ENTITIES
    if _is_respaced(first, second):
        return SPACING
    return None


def _is_respaced(first: TextSignature, second: TextSignature) -> bool:
    """The same characters spaced otherwise, where spacing can be meaning: code indented
    otherwise, "'a  b'" / "'a b'". Prose on one line spaced otherwise passes."""
    return (
        (first.has_layout or second.has_layout)
        and first.unspaced == second.unspaced
        and first.text != second.text
    )


def _is_contradiction(first: frozenset[str], second: frozenset[str]) -> bool:
    """Each text states something of the feature the other does not. Units and dates named
    on one side only are usually implied by the other ("per day" / "a day", "today" added
    for emphasis, "周四" / "周四上午"), so an omission or an added detail is not treated as
    a difference (measured: bench/semantic/compare.py guard)."""
    return bool(first - second) and bool(second - first)


def _is_mentioned(spans: frozenset[str], other: TextSignature) -> bool:
    """Every span (squashed) occurs in the other text: "'best' deck" / "best decks"."""
    return all(span in other.squashed for span in spans)


def _is_requoted(first: TextSignature, second: TextSignature) -> bool:
    """A span quoted in both texts, written otherwise in one ("'a  b'" / "'a b'"): quoted
    text is literal, so its spacing and case are meaning."""
    for squashed, span in first.quoted_spans:
        written = {other for key, other in second.quoted_spans if key == squashed}
        if written and span not in written:
            return True
    return False


def _has_unit_swap(first: TextSignature, second: TextSignature) -> bool:
    """The same number with a different unit on each side ("5 km" / "5 miles")."""
    units_by_number: dict[str, set[str]] = {}
    for quantity in first.quantities:
        number, unit = quantity.split(" ", 1)
        units_by_number.setdefault(number, set()).add(unit)
    for quantity in second.quantities:
        number, unit = quantity.split(" ", 1)
        if number in units_by_number and unit not in units_by_number[number]:
            return True
    return False


def _has_unmentioned(entities: frozenset[str], other: TextSignature) -> bool:
    """An entity the other text has neither as a word nor, if long enough, inside its text
    ("Cepsa SA" / "CepsaSA", "Bhagavad Gita" / "Bhagavad-Gita"). Capitalisation is
    unreliable in user text ("google" / "Google"): a word in any case is a mention."""
    return any(
        entity not in other.words
        and (len(entity) < _MIN_CONTAINED_ENTITY_CHARS or _squash(entity) not in other.squashed)
        for entity in entities
    )


def _quoted_spans(text: str) -> list[str]:
    return [next(group for group in m.groups() if group) for m in _QUOTED.finditer(text)]


def _squash(span: str) -> str:
    """Lower-cased, without whitespace or hyphens ("Bhagavad-Gita" = "Bhagavad Gita")."""
    return _SQUASHED_OUT.sub("", span).lower()


def _stem(word: str) -> str:
    """A crude English stem so plurals and possessives do not look like new entities."""
    for suffix in ("'s", "’s"):
        if word.endswith(suffix):
            word = word[: -len(suffix)]
    if len(word) <= 3 or word.endswith(("ss", "us", "is")):
        return word
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith(("sses", "xes", "zes", "ches", "shes")):
        return word[:-2]
    return word[:-1] if word.endswith("s") else word


def _entities(text: str) -> set[str]:
    """Capitalised words that do not start a sentence, acronyms and letter-digit mixes.

    Title-cased or all-caps text carries no capitalisation signal, so only acronyms
    with digits survive there.
    """
    entities: set[str] = set()
    for sentence in _SENTENCE_END.split(text):
        tokens = _LATIN_WORD.findall(sentence)
        capitalized = sum(1 for token in tokens if token[0].isupper())
        is_title_case = len(tokens) >= 3 and capitalized / len(tokens) > 0.6
        for position, token in enumerate(tokens):
            word = token.strip("'’.-")
            if not word:
                continue
            has_digit = any(ch.isdigit() for ch in word)
            is_inner_upper = any(ch.isupper() for ch in word[1:])
            is_capitalized = word[0].isupper() and position > 0 and not is_title_case
            if (
                (has_digit and not word.isdigit())
                or (is_inner_upper and not is_title_case)
                or (
                    is_capitalized
                    and word.lower() not in lexicon.NOT_ENTITIES
                    and not lexicon.is_unit_word(word.lower())
                )
            ):
                entities.add(_stem(word.lower()))
    return entities


def _numbers_and_quantities(lowered: str) -> tuple[set[str], set[str]]:
    """Numeric values (digits, English and Chinese number words) and value+unit pairs."""
    numbers: set[str] = set()
    quantities: set[str] = set()
    myriad_ends: list[int] = []
    for match in _DIGITS.finditer(lowered):
        value = _normalize_number(match.group(0))
        multiplier = _MYRIADS.get(lowered[match.end() : match.end() + 1])
        if multiplier is not None:
            value = _scaled(value, multiplier)
            myriad_ends.append(match.end())
        numbers.add(value)
        unit = lexicon.unit_after(lowered, match.end()) or lexicon.currency_before(
            lowered, match.start()
        )
        if unit:
            quantities.add(f"{value} {unit}")
    cleaned = lexicon.strip_idioms(_blank(lowered, myriad_ends))
    for match in _HAN_NUMERAL.finditer(cleaned):
        han_value = lexicon.han_number(match.group(0))
        if han_value is not None:
            numbers.add(str(han_value))
            unit = lexicon.unit_after(cleaned, match.end())
            if unit:
                quantities.add(f"{han_value} {unit}")
    for word in re.findall(r"[a-z]+", lowered):
        number_word = lexicon.NUMBER_WORDS.get(word)
        if number_word is not None:
            numbers.add(str(number_word))
    return numbers, quantities


def _blank(text: str, positions: list[int]) -> str:
    """``text`` with a space at each position (multipliers already read with their digits)."""
    if not positions:
        return text
    chars = list(text)
    for position in positions:
        chars[position] = " "
    return "".join(chars)


def _scaled(value: str, multiplier: int) -> str:
    try:
        scaled = float(value) * multiplier
    except ValueError:
        return value
    return str(int(scaled)) if scaled.is_integer() else repr(scaled)


def _normalize_number(raw: str) -> str:
    """ "1,000" and "1000" compare equal; "3.50" and "3.5" too; a decimal comma stays decimal."""
    text = raw.lstrip("+")
    if re.fullmatch(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?", text):
        text = text.replace(",", "")
    elif text.count(",") == 1 and "." not in text:
        text = text.replace(",", ".")
    if "." in text:
        text = text.rstrip("0").rstrip(".") or "0"
    return text.lstrip("0") or "0" if not text.startswith("-") else text
