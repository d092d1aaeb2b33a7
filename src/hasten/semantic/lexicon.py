"""Word lists the near-miss guard and the freshness rules read (English and Chinese).

Immutable data plus small pure lookups; nothing here keeps state.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from types import MappingProxyType

NUMBER_WORDS = MappingProxyType(
    {
        "zero": 0,
        "two": 2,
        "three": 3,
        "four": 4,
        "five": 5,
        "six": 6,
        "seven": 7,
        "eight": 8,
        "nine": 9,
        "ten": 10,
        "eleven": 11,
        "twelve": 12,
        "fifteen": 15,
        "twenty": 20,
        "thirty": 30,
        "forty": 40,
        "fifty": 50,
        "hundred": 100,
        "thousand": 1000,
        "million": 1_000_000,
        "billion": 1_000_000_000,
        "first": 1,
        "second": 2,
        "third": 3,
        "twice": 2,
        "double": 2,
        "half": 0.5,
    }
)
# "one" is left out on purpose: "which one", "one of", "a/one day" rarely decide the answer.

_HAN_DIGITS = MappingProxyType(
    {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4}
    | {"五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
)
_HAN_SMALL_UNITS = MappingProxyType({"十": 10, "百": 100, "千": 1000})
_HAN_BIG_UNITS = MappingProxyType({"万": 10_000, "亿": 100_000_000})
# Everyday words written with numerals that are not numbers ("very", "in case", "together"...).
_HAN_IDIOMS = re.compile(
    r"十分|万一|千万|一些|一起|一样|一直|一定|一般|一下|一点|一切|一边|一旦|一共|一致|统一|唯一"
    r"|之一|一会|一向|一同|不一|一种|一个|一位|一名|一只|一条|一张|一辆|一群|一片|一块|一次|一家"
    r"|三明治|万物|千方百计|一带一路|乱七八糟|七上八下|一心|一生|一切"
)

# Each unit with the spellings that name it.
_UNIT_SPELLINGS: MappingProxyType[str, tuple[str, ...]] = MappingProxyType(
    {
        "km": ("km", "kms", "kilometer", "kilometers", "kilometre", "kilometres", "公里", "千米"),
        "mi": ("mile", "miles", "mi", "英里"),
        "m": ("meter", "meters", "metre", "metres", "m", "米"),
        "cm": ("cm", "centimeter", "centimeters", "厘米"),
        "mm": ("mm", "millimeter", "毫米"),
        "ft": ("ft", "foot", "feet", "英尺"),
        "in": ("inch", "inches", "英寸", "寸"),
        "kg": ("kg", "kgs", "kilogram", "kilograms", "公斤", "千克"),
        "g": ("g", "gram", "grams", "克"),
        "jin": ("斤",),
        "lb": ("lb", "lbs", "pound", "pounds", "磅"),
        "oz": ("oz", "ounce", "ounces"),
        "l": ("l", "liter", "liters", "litre", "litres", "升"),
        "ml": ("ml", "milliliter", "毫升"),
        "gal": ("gallon", "gallons"),
        "degC": ("°c", "celsius", "摄氏度"),
        "degF": ("°f", "fahrenheit", "华氏度"),
        "K": ("kelvin",),
        "deg": ("度", "degrees", "degree"),
        "%": ("%", "percent", "percentage"),
        "mph": ("mph",),
        "km/h": ("km/h", "kmh"),
        "KB": ("kb",),
        "MB": ("mb",),
        "GB": ("gb",),
        "TB": ("tb",),
        "GHz": ("ghz",),
        "MHz": ("mhz",),
        "Hz": ("hz",),
        "kW": ("kw",),
        "kWh": ("kwh",),
        "W": ("watt", "watts", "w"),
        "V": ("v", "volt", "volts"),
        "mAh": ("mah",),
        "USD": ("$", "usd", "dollar", "dollars", "美元", "美金"),
        "EUR": ("€", "eur", "euro", "euros", "欧元"),
        "GBP": ("£", "gbp", "英镑"),
        "CNY": ("¥", "元", "块", "yuan", "rmb", "人民币", "cny"),
        "JPY": ("日元", "yen"),
        "INR": ("₹", "rs", "inr", "rupee", "rupees"),
        "lakh": ("lakh", "lakhs"),
        "crore": ("crore", "crores"),
        "s": ("second", "seconds", "sec", "secs", "秒"),
        "min": ("minute", "minutes", "mins", "min", "分钟"),
        "h": ("hour", "hours", "hrs", "hr", "小时"),
        "day": ("day", "days", "天", "日"),
        "week": ("week", "weeks", "周", "星期"),
        "month": ("month", "months", "个月", "月"),
        "year": ("year", "years", "yrs", "年"),
        "age": ("岁",),
    }
)
_UNITS = MappingProxyType(
    {spelling: unit for unit, spellings in _UNIT_SPELLINGS.items() for spelling in spellings}
)
# Unit words too ambiguous to count unless they follow a number ("in", "m", "second"...).
_BOUND_ONLY_UNITS = frozenset(
    {"m", "g", "l", "w", "v", "mi", "min", "sec", "hr", "度", "元", "块", "天", "日", "周"}
    | {"月", "年", "米", "克", "升", "寸", "斤", "秒", "second", "rs", "degree", "degrees"}
    | {"星期", "个月", "岁"}
)
# Chinese unit words unambiguous enough to count anywhere, longest first.
_HAN_FREE_UNITS = re.compile(
    "|".join(
        sorted(
            (w for w in _UNITS if not w.isascii() and len(w) >= 2 and w not in _BOUND_ONLY_UNITS),
            key=len,
            reverse=True,
        )
    )
)
_UNIT_AFTER = re.compile(r"\s?(°c|°f|%|km/h|[a-z]+|[\u4e00-\u9fff]{1,3})")

_CURRENCY_BEFORE = re.compile(r"(\$|€|£|¥|₹|rs|inr|usd|eur|rmb)\.?\s?$")

_MONTHS = frozenset(
    {"january", "february", "march", "april", "june", "july", "august", "september"}
    | {"october", "november", "december", "sept", "oct", "nov", "dec", "jan", "feb", "aug"}
)  # "may" is a verb far more often than a month.
_WEEKDAYS = frozenset(
    {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}
)
_RELATIVE_DAYS = frozenset(
    {"yesterday", "today", "tomorrow", "tonight", "weekend", "morning", "evening", "night"}
)
_HAN_DATES = re.compile(
    r"前天|昨天|今天|明天|后天|今晚|昨晚|明晚|去年|今年|明年|上周|本周|下周|上个月|这个月|下个月"
    r"|星期[一二三四五六日天]|周[一二三四五六日末]|早上|上午|中午|下午|晚上|春天|夏天|秋天|冬天"
)

_NEGATIONS = frozenset(
    {"not", "no", "never", "none", "nobody", "nothing", "nowhere", "neither", "nor"}
    | {"cannot", "without", "unable", "lack", "lacks"}
)
_HAN_NEGATION = re.compile(r"不|没|别|非|无|未|莫|勿")
# Chinese words that contain a negation character but do not negate, and A-not-A questions
# ("是不是" = "is it"), which ask rather than deny.
_HAN_NOT_NEGATION = re.compile(
    r"(.)[不没]\1|有没有|非常|不过|不断|不错|不少|不仅|不管|无论|除非|不如|差不多|并不是|"
    r"无聊|无数|莫名|不得不|不同|无法|非洲|南非|北非"
)

_SCRIPTS = (
    ("ja", re.compile(r"[\u3040-\u30ff]")),
    ("ko", re.compile(r"[\uac00-\ud7af]")),
    ("zh", re.compile(r"[\u4e00-\u9fff]")),
    ("ru", re.compile(r"[\u0400-\u04ff]")),
    ("ar", re.compile(r"[\u0600-\u06ff]")),
    ("hi", re.compile(r"[\u0900-\u097f]")),
    ("el", re.compile(r"[\u0370-\u03ff]")),
    ("he", re.compile(r"[\u0590-\u05ff]")),
    ("th", re.compile(r"[\u0e00-\u0e7f]")),
)
# Frequent function words that tell the common Latin-script languages apart.
_LATIN_MARKERS = MappingProxyType(
    {
        "en": frozenset({"the", "is", "what", "how", "and", "of", "to", "do", "does", "why"}),
        "es": frozenset({"el", "los", "las", "es", "qué", "cómo", "por", "para", "una", "del"}),
        "fr": frozenset({"le", "les", "est", "quel", "quelle", "comment", "pour", "une", "des"}),
        "de": frozenset({"der", "die", "das", "ist", "und", "wie", "was", "nicht", "ein", "eine"}),
        "pt": frozenset({"o", "os", "é", "não", "como", "para", "uma", "do", "da", "por que"}),
        "it": frozenset({"il", "gli", "è", "che", "come", "perché", "una", "della", "non"}),
    }
)

# Capitalised mid-sentence words that are not names.
NOT_ENTITIES = frozenset(
    {"i", "i'm", "i've", "i'd", "i'll", "what", "how", "why", "which", "who", "when", "where"}
    | {"is", "are", "the", "a", "an", "can", "do", "does", "should", "will", "would", "if"}
    | {"and", "or", "but", "in", "on", "for", "to", "of", "my", "it", "you", "we", "they"}
    | _MONTHS
    | _WEEKDAYS
    | {"ok", "okay", "yes", "no", "please", "thanks"}
)


def language_of(lowered: str, words: Sequence[str]) -> str:
    """The script of the text, and for Latin script the language of its function words."""
    if "¿" in lowered or "¡" in lowered:
        return "es"
    for code, pattern in _SCRIPTS:
        if pattern.search(lowered):
            return code
    scores = {
        code: sum(1 for w in words if w in markers) for code, markers in _LATIN_MARKERS.items()
    }
    best = max(scores, key=lambda code: scores[code])
    # Only a clear majority of at least two marker words names a language other than English;
    # short or mixed questions stay "latin" so they still match each other.
    if best != "en" and scores[best] >= 2 and scores[best] > 2 * scores["en"]:
        return best
    return "latin"


def is_negated(lowered: str, words: Sequence[str]) -> bool:
    """Whether the question denies something (English or Chinese)."""
    if any(w in _NEGATIONS or w.endswith(("n't", "n’t")) for w in words):
        return True
    return bool(_HAN_NEGATION.search(_HAN_NOT_NEGATION.sub("", lowered)))


def date_words(lowered: str, words: Sequence[str]) -> set[str]:
    """Month, weekday and relative-day words (numbers and years are checked as numbers)."""
    found = {w for w in words if w in _MONTHS or w in _WEEKDAYS or w in _RELATIVE_DAYS}
    # 星期四 and 周四 name the same day.
    found.update(
        d.replace("星期", "周").replace("周天", "周日") for d in _HAN_DATES.findall(lowered)
    )
    return found


def unit_words(lowered: str, words: Sequence[str]) -> set[str]:
    """Canonical units named anywhere in the text (unambiguous unit words only)."""
    found = {_UNITS[w] for w in words if w in _UNITS and w not in _BOUND_ONLY_UNITS}
    found.update(_UNITS[w] for w in _HAN_FREE_UNITS.findall(lowered))
    return found


def is_unit_word(word: str) -> bool:
    return word in _UNITS


def unit_after(text: str, position: int) -> str | None:
    """The canonical unit right after a number ending at ``position``, if any."""
    match = _UNIT_AFTER.match(text, position)
    if match is None:
        return None
    token = match.group(1)
    for length in range(min(len(token), 3), 0, -1):
        # Chinese runs on without spaces: try the longest unit prefix ("公里数" -> "公里").
        candidate = token if token.isascii() else token[:length]
        if candidate in _UNITS:
            return _UNITS[candidate]
        if token.isascii():
            break
    return None


def currency_before(text: str, position: int) -> str | None:
    """The currency written before a number starting at ``position`` ("$5", "Rs. 2000")."""
    match = _CURRENCY_BEFORE.search(text[max(0, position - 6) : position])
    return _UNITS[match.group(1)] if match else None


def strip_idioms(lowered: str) -> str:
    """Blanks out everyday Chinese words that merely contain numerals."""
    return _HAN_IDIOMS.sub(" ", lowered)


def han_number(numeral: str) -> int | None:
    """The value of a Chinese numeral ("十五" -> 15, "两千" -> 2000); None for a lone "一"."""
    if numeral == "一":
        return None  # mostly the article "a", not the number one
    total = 0
    section = 0
    digit = 0
    for char in numeral:
        if char in _HAN_DIGITS:
            digit = _HAN_DIGITS[char]
        elif char in _HAN_SMALL_UNITS:
            section += (digit or 1) * _HAN_SMALL_UNITS[char]
            digit = 0
        else:
            total += (section + digit) * _HAN_BIG_UNITS[char]
            section = 0
            digit = 0
    return total + section + digit


# "live" as in broadcast ("live score", "is it live", "watch the match live"), never the
# verb: on the dev files' 42,575 questions, the bare word matched 217 of 451 volatile ones,
# nearly all "where to live" questions, whose answers do not change by the minute.
_LIVE = (
    r"live(?:[-\s](?:[\w'-]+\s+){0,2}?|)"
    r"(?:scores?|stream(?:s|ing)?|results?|updates?|coverage|feeds?|broadcasts?|telecast"
    r"|news|match(?:es)?|games?|blogs?|tv|events?|prices?|rates?|tickers?|data|chat"
    r"|commentary|cams?|webcams?|traffic)"
    r"|(?:is|are|was|go|goes|going|went|gone|be|being)\s+live"
    r"|(?:watch|watching|stream|streaming|broadcast|broadcasting|shown|showing|airing)"
    r"\s+(?:[\w'-]+\s+){0,5}?live"
)
# The freshness rules' (``freshness``; any whitespace between words: the text is as sent):
# answers that change within minutes, never cached.
VOLATILE_WORDS = re.compile(
    rf"\b(?:right\s+now|at\s+the\s+moment|currently|{_LIVE}|real[-\s]time"
    r"|this\s+(?:minute|second|hour)|weather|forecast|temperature\s+outside|stock\s+price"
    r"|share\s+price|exchange\s+rate"
    r"|score\s+of\s+(?:the|today)|what\s+time\s+is\s+it|current\s+time|time\s+now|traffic)\b"
    r"|现在|此刻|目前|当前|实时|天气|气温|股价|汇率|比分|几点|路况",
    re.IGNORECASE,
)
# ... and answers that change within a day or so, cached briefly.
SHORT_LIVED_WORDS = re.compile(
    r"\b(?:now|today|tonight|tomorrow|yesterday|this\s+(?:week|weekend|month|year)|latest"
    r"|newest|recent(?:ly)?|breaking|news|headlines?|prices?|cost\s+today|trending|current"
    r"|upcoming|as\s+of|still\s+open|open\s+now)\b"
    r"|今天|今日|今晚|明天|昨天|本周|这周|本月|今年|最新|最近|新闻|价格|多少钱|热搜|近期",
    re.IGNORECASE,
)
