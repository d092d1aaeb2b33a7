"""Near-miss guard: decisive differences in English and Chinese, plus properties (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.semantic import freshness, guard, lexicon, polarity


def near_miss(first: str, second: str) -> str | None:
    """The reason the guard finds for the two questions to need different answers."""
    return guard.compare(guard.signature(first), guard.signature(second))


SAME_MEANING = [
    ("How can I become an engineer at google?", "How do I become an engineer at Google?"),
    ("What will women never tell men?", "What do women not tell men?"),
    ("Is $5 enough for lunch?", "Is 5 dollars enough for lunch?"),
    ("How do I learn 1,000 words fast?", "How can I learn 1000 words fast?"),
    ("Which headphones are best under 2000 rupees?", "Which headphone is best under Rs. 2000?"),
    ("你是不是学生", "你是学生吗"),
    ("一个小孩在骑马。", "孩子在骑马。"),
    ("怎样学好英语", "如何学好英语"),
    ("I have 3 apples", "I have three apples"),
    ("我有三个苹果", "我有3个苹果"),
    # Quotes, backticks, spacing and case around the same words are formatting, not meaning.
    ("Is there a 'best' deck in Clash Royale?", "What are the best decks in Clash Royale?"),
    ("What does `with_format` do?", "What does with_format do?"),
    ("“命名”是首选的吗", "命名是首选的吗"),
    ("Where did Sandra Tapias sail?", "Where did SandraTapias sail?"),
    ("What is the Bhagavad Gita about?", "What is the Bhagavad-Gita about?"),
    ("Is dropping out of B.tech a good idea?", "Is dropping out of B. tech a good idea?"),
    # Full-width digits, myriads and weekday spellings.
    ("年薪是３６１，４００美元吗", "年薪是361400美元吗"),
    ("年薪是39.5万美元吗", "年薪是395,000美元吗"),
    ("星期四开会吗", "周四开会吗"),
    # A date or unit detail added on one side is not a contradiction.
    ("周四发生了什么", "周四上午发生了什么"),
]

DIFFERENT = [
    ("How do I learn Python in 3 months?", "How do I learn Python in 6 months?", guard.NUMBERS),
    ("How do I learn Python?", "How do I learn Java?", guard.ENTITIES),
    ("Why is the sky blue?", "Why isn't the sky blue?", guard.NEGATION),
    ("What does os.path.join do?", "What does os.path.split do?", guard.CODE),
    ("What does `fetchone` return?", "What does `fetchall` return?", guard.QUOTED),
    ('Translate "thank you"', 'Translate "excuse me"', guard.QUOTED),
    ("What is the weather on Monday?", "What is the weather on Friday?", guard.DATES),
    ("How far is 5 km?", "How far is 5 miles?", guard.UNITS),
    ("Convert 30 celsius", "Convert 30 fahrenheit", guard.UNITS),
    ("How old is Obama?", "奥巴马多大了？", guard.LANGUAGE),
    ("¿Cuántos años tiene Obama?", "How old is Obama?", guard.LANGUAGE),
    ("三个男人在跳舞", "两个男人在跳舞", guard.NUMBERS),
    ("我喜欢这部电影", "我不喜欢这部电影", guard.NEGATION),
    ("他没有去北京", "他去北京了", guard.NEGATION),
    ("今天的会议几点开始", "明天的会议几点开始", guard.DATES),
    ("这本书多少人民币", "这本书多少美元", guard.UNITS),
    ("《红楼梦》的作者是谁", "《西游记》的作者是谁", guard.QUOTED),
    ("iPhone 14 battery life", "iPhone 15 battery life", guard.NUMBERS),
    ("年薪是39.5万美元吗", "年薪是39.5美元吗", guard.NUMBERS),
    ("What happened on Monday?", "What happened on Friday morning?", guard.DATES),
    ('What does "get over" mean?', "What does get out mean?", guard.QUOTED),
    ("What does `os.path` hold?", "What does `os.path.join` hold?", guard.QUOTED),
    ("How much did they pay for Cepsa SA?", "How much did they pay for Repsol SA?", guard.ENTITIES),
    # Not NFKC (issue 41, defect 6): superscripts and fractions are other numbers.
    ("What is 10² + 1?", "What is 102 + 1?", guard.NUMBERS),
    ("What is ½ of 8?", "What is 1⁄2 of 8?", guard.NUMBERS),
    # Quoted text is literal; code's indentation is meaning.
    ("How long is 'a  b'?", "What is the length of 'a b'?", guard.QUOTED),
    ("Why?\nif x:\n    y()\nz()", "Why?\nif x:\n    y()\n    z()", guard.SPACING),
    ("How long is 'a  b'?", "How long is 'a b'?", guard.QUOTED),
]


@pytest.mark.parametrize(("first", "second"), SAME_MEANING)
def test_same_meaning_passes(first: str, second: str) -> None:
    assert near_miss(first, second) is None


@pytest.mark.parametrize(("first", "second", "reason"), DIFFERENT)
def test_decisive_difference_is_caught(first: str, second: str, reason: str) -> None:
    assert near_miss(first, second) == reason
    assert near_miss(second, first) == reason


def test_chinese_numerals() -> None:
    assert lexicon.han_number("十五") == 15
    assert lexicon.han_number("两千零三") == 2003
    assert lexicon.han_number("三万五千") == 35000
    assert lexicon.han_number("一") is None


_WORDS = st.sampled_from(
    ["how", "do", "i", "learn", "cook", "rice", "fast", "the", "best", "way", "to", "a"]
)
_QUESTION = st.lists(_WORDS, min_size=2, max_size=10).map(" ".join)
_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=60)


@given(_TEXT)
@settings(max_examples=200, deadline=None)
def test_text_never_differs_from_itself(text: str) -> None:
    assert near_miss(text, text) is None


@given(_TEXT, _TEXT)
@settings(max_examples=200, deadline=None)
def test_symmetric_and_deterministic(first: str, second: str) -> None:
    reason = near_miss(first, second)
    assert reason == near_miss(second, first)
    assert reason == near_miss(first, second)
    assert reason is None or reason in guard.REASONS


@given(_QUESTION)
@settings(max_examples=100, deadline=None)
def test_case_and_spacing_do_not_matter(question: str) -> None:
    assert near_miss(question, "  " + question.upper().replace(" ", "  ") + "?") is None


@given(_QUESTION, st.integers(0, 10_000), st.integers(0, 10_000))
@settings(max_examples=150, deadline=None)
def test_different_numbers_are_rejected(question: str, first: int, second: int) -> None:
    reason = near_miss(f"{question} {first}", f"{question} {second}")
    assert (reason is None) == (first == second)


@given(_QUESTION)
@settings(max_examples=100, deadline=None)
def test_negation_is_rejected(question: str) -> None:
    assert near_miss(f"why {question}", f"why not {question}") == guard.NEGATION


@given(_QUESTION, st.sampled_from(["Paris", "London", "Tokyo"]), st.sampled_from(["Rome", "Oslo"]))
@settings(max_examples=100, deadline=None)
def test_swapped_entity_is_rejected(question: str, first: str, second: str) -> None:
    assert near_miss(f"{question} in {first}", f"{question} in {second}") is not None


@given(_QUESTION, st.sampled_from(["北京", "上海"]), st.integers(2, 99), st.integers(2, 99))
@settings(max_examples=100, deadline=None)
def test_chinese_numbers_are_rejected(question: str, city: str, first: int, second: int) -> None:
    reason = near_miss(f"{city}{first}号", f"{city}{second}号")
    assert (reason is None) == (first == second)


def test_freshness_classes() -> None:
    policy = freshness.FreshnessPolicy(default_ttl_s=3600, short_ttl_s=300)
    assert freshness.ttl_s("What's the weather in Paris right now?", policy=policy) == 0
    assert freshness.ttl_s("北京现在几点", policy=policy) == 0
    assert freshness.ttl_s("latest iPhone model", policy=policy) == 300
    assert freshness.ttl_s("今天有什么新闻", policy=policy) == 300
    assert freshness.ttl_s("Who wrote Hamlet?", policy=policy) == 3600
    # The text is as sent (issue 41, defect 6): any whitespace between a phrase's words.
    assert freshness.ttl_s("The weather right\n  now?", policy=policy) == 0
    assert freshness.ttl_s("As  of\tJune, who leads?", policy=policy) == 300


@pytest.mark.parametrize(
    "text",
    [
        "What's the live score of the India match?",
        "live cricket score",
        "Where can I watch the game live?",
        "Is the stream live?",
        "going live on Instagram",
        "livestream of the election",
        "live election results",
    ],
)
def test_live_as_in_broadcast_is_volatile(text: str) -> None:
    assert freshness.ttl_s(text, policy=freshness.FreshnessPolicy()) == 0


@pytest.mark.parametrize(
    "text",
    ["Where do you live?", "What is it like to live in Paris?", "How long do cats live?",
     "Is 80,000 pounds enough to live in london?", "I live in a live music town"],
)  # fmt: skip
def test_live_the_verb_is_not(text: str) -> None:
    policy = freshness.FreshnessPolicy(default_ttl_s=3600, short_ttl_s=300)
    assert freshness.ttl_s(text, policy=policy) == 3600  # not volatile, not short-lived


POLAR_DIFFERENT = [
    ("Turn on the lights in the kitchen", "Turn off the lights in the kitchen"),
    ("Turn the kitchen lights off", "Switch on the kitchen lights"),
    ("How do I enable two-factor login?", "How do I disable two-factor login?"),
    ("What is the best way to sell a used car?", "What's the best way to buy a used car?"),
    ("How do I scroll up in tmux?", "How do I scroll down in tmux?"),
    ("打开厨房的灯", "关闭厨房的灯"),
    ("请开灯", "请关灯"),
    ("股价为什么上涨", "股价为什么下跌"),
    ("吃饭之前可以喝水吗", "吃饭之后可以喝水吗"),
]
POLAR_SAME = [
    ("What is one thing to see in Paris?", "What's one thing to see in Paris?"),
    ("How do I set up a VPN?", "How do I shut down a VPN?"),  # phrasal verbs, not directions
    ("What are the pros and cons of Rust?", "What are the cons of Rust?"),  # both sides: none
    ("How do I turn on dark mode?", "How do I enable dark mode?"),
    ("What is on TV tonight?", "What is off TV tonight?"),  # prepositions, not switches
    ("二手车买卖注意什么", "二手车卖出注意什么"),  # 买卖 (trade) takes no side
    ("这个开关怎么用", "这个关闭按钮怎么用"),  # 开关 (a switch) takes no side
]


@pytest.mark.parametrize(("first", "second"), POLAR_DIFFERENT)
def test_opposites_are_caught(first: str, second: str) -> None:
    assert near_miss(first, second) == guard.POLARITY
    assert near_miss(second, first) == guard.POLARITY


@pytest.mark.parametrize(("first", "second"), POLAR_SAME)
def test_no_polarity_veto_without_a_flip(first: str, second: str) -> None:
    assert near_miss(first, second) != guard.POLARITY


def _opposites(is_ascii: bool) -> list[tuple[str, str]]:
    return [
        (one, other)
        for ones, others in polarity.POLARITY_AXES.values()
        for one in sorted(ones)
        for other in sorted(others)
        if one.isascii() == is_ascii and other.isascii() == is_ascii
    ]


_FILLER = st.lists(
    st.sampled_from(["how", "do", "i", "the", "file", "price", "of", "a", "car", "why", "to"]),
    max_size=6,
).map(" ".join)
_HAN_FILLER = st.sampled_from(["", "请", "怎么", "如何", "我想", "为什么要"])
_HAN_OBJECT = st.sampled_from(["", "厨房的灯", "文件", "价格", "手机", "呢"])


@given(_FILLER, st.sampled_from(_opposites(is_ascii=True)), _FILLER)
@settings(max_examples=200, deadline=None)
def test_one_swapped_english_opposite_is_vetoed(
    before: str, pair: tuple[str, str], after: str
) -> None:
    one, other = (f"{before} {word} {after}" for word in pair)
    assert near_miss(one, other) == guard.POLARITY
    assert near_miss(other, one) == guard.POLARITY
    assert near_miss(one, one) is None


@given(_HAN_FILLER, st.sampled_from(_opposites(is_ascii=False)), _HAN_OBJECT)
@settings(max_examples=200, deadline=None)
def test_one_swapped_chinese_opposite_is_vetoed(
    before: str, pair: tuple[str, str], after: str
) -> None:
    one, other = (f"{before}{word}{after}" for word in pair)
    assert near_miss(one, other) == guard.POLARITY
    assert near_miss(other, one) == guard.POLARITY
    assert near_miss(other, other) is None


_POLAR_WORDS = sorted({word for pair in _opposites(is_ascii=True) for word in pair})


@given(
    st.lists(st.sampled_from([*_POLAR_WORDS, "turn", "on", "off", "up", "down", "it"]), max_size=8),
    st.lists(st.sampled_from([*_POLAR_WORDS, "turn", "on", "off", "up", "down", "it"]), max_size=8),
)
@settings(max_examples=300, deadline=None)
def test_polarity_is_symmetric(first: list[str], second: list[str]) -> None:
    one, other = " ".join(first), " ".join(second)
    assert near_miss(one, other) == near_miss(other, one)
    assert near_miss(one, one) is None
