"""Opposites that flip an answer ("turn on" / "turn off", "buy" / "sell", 打开 / 关闭):
the polarity check of the near-miss guard. Immutable data plus pure lookups.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from types import MappingProxyType


def _forms(*stems: str) -> frozenset[str]:
    """A verb with its regular inflections ("add" -> add, adds, added, adding)."""
    forms: set[str] = set()
    for stem in stems:
        base = stem[:-1] if stem.endswith("e") else stem
        forms.update({stem, stem + "s", base + "ed", base + "ing"})
    return frozenset(forms)


# Opposites that flip the answer: axis -> (words of one side, words of the other side).
# English words match whole tokens; Chinese words match as substrings (no spaces), so only
# compounds are listed (a lone 开 is in 开始 "start", a lone 关 in 关于 "about").
POLARITY_AXES: MappingProxyType[str, tuple[frozenset[str], frozenset[str]]] = MappingProxyType(
    {
        "switch": (
            _forms("enable", "activate") | {"打开", "开启", "启用", "激活", "开灯", "开机"},
            _forms("disable", "deactivate")
            | {"关闭", "关掉", "关上", "禁用", "停用", "关灯", "关机"},
        ),
        "change": (
            _forms("increase") | {"增加", "增长", "提高", "上升", "升高", "上涨", "涨价"},
            _forms("decrease") | {"减少", "降低", "下降", "减小", "下跌", "降价"},
        ),
        "time": (frozenset({"before", "之前", "以前"}), frozenset({"after", "之后", "以后"})),
        "extreme": (
            frozenset({"max", "maximum", "maximize", "maximise", "maximal", "最大", "最多"}),
            frozenset({"min", "minimum", "minimize", "minimise", "minimal", "最小", "最少"}),
        ),
        "trade": (
            _forms("buy", "purchase") | {"bought", "buyer", "buyers", "买"},
            _forms("sell") | {"sold", "seller", "sellers", "卖"},
        ),
        "door": (_forms("open") | {"opened"}, _forms("close") | {"closed"}),
        "run": (
            _forms("start") | {"开始", "启动"},
            _forms("stop") | {"stopped", "stopping", "停止"},
        ),
        "edit": (
            _forms("add") | {"添加", "加入"},
            _forms("remove", "delete") | {"删除", "移除", "删掉"},
        ),
        "transfer": (_forms("upload") | {"上传"}, _forms("download") | {"下载"}),
        "io": (_forms("import") | {"导入"}, _forms("export") | {"导出"}),
        "cipher": (
            _forms("encrypt") | {"encryption", "加密"},
            _forms("decrypt") | {"decryption", "解密"},
        ),
        "truth": (frozenset({"true"}), frozenset({"false"})),
        "direction": (
            frozenset({"upward", "upwards", "upstairs", "upvote"} | _forms("upgrade")),
            frozenset({"downward", "downwards", "downstairs", "downvote"} | _forms("downgrade")),
        ),
        "amount": (frozenset({"more", "更多"}), frozenset({"less", "fewer", "更少"})),
        "level": (
            frozenset({"higher", "highest", "更高", "最高"}),
            frozenset({"lower", "lowest", "更低", "最低"}),
        ),
        "rank": (frozenset({"best", "最好"}), frozenset({"worst", "最差", "最坏"})),
        "merit": (
            frozenset({"pros", "advantage", "advantages", "优点", "优势"}),
            frozenset({"cons", "disadvantage", "disadvantages", "缺点", "劣势"}),
        ),
        "weight": (
            _forms("gain") | {"增重", "增肥"},
            frozenset({"lose", "loses", "losing", "减肥"}),
        ),
        "login": (frozenset({"login", "登录", "登入"}), frozenset({"logout", "登出", "退出登录"})),
    }
)
# "on"/"off" and "up"/"down" decide the answer only as a particle of a switching or moving
# verb ("turn the lights off", "scroll down"); elsewhere they are prepositions ("on Monday")
# or parts of unrelated phrasal verbs ("set up", "shut down", "calm down").
_PARTICLE_AXES = MappingProxyType({"on": ("switch", 0), "off": ("switch", 1)})
_DIRECTION_PARTICLES = MappingProxyType({"up": ("direction", 0), "down": ("direction", 1)})
_SWITCH_VERBS = frozenset(_forms("turn", "switch", "toggle", "flip", "power") | {"switches"})
_MOVE_VERBS = frozenset(
    _forms("scroll", "move", "swipe", "shift", "round", "count", "slide", "step")
    | {"go", "goes", "going", "went", "gone", "volume", "price", "prices", "stock", "stocks"}
)
# A particle may follow its verb's object ("turn the kitchen lights off").
_PARTICLE_WINDOW = 4
# Each polar word's (axis, side): English words are looked up by token, Chinese ones found by
# ``_HAN_POLARITY`` (a word is one or the other: tokens are ASCII).
_SIDES = MappingProxyType(
    {
        word: (axis, side)
        for axis, sides in POLARITY_AXES.items()
        for side in (0, 1)
        for word in sides[side]
    }
)
_HAN_POLARITY = re.compile(
    "|".join(sorted((w for w in _SIDES if not w.isascii()), key=len, reverse=True))
)
# Chinese words that contain a polar word without taking a side ("买卖" trade, "开关" switch,
# "加密货币" cryptocurrency, "拍卖" auction, "出卖" betray).
_HAN_NOT_POLAR = re.compile(r"买卖|开关|加密货币|加密币|拍卖|出卖|多多少少|以前以后|之前之后")
_ENGLISH_TOKEN = re.compile(r"[a-z]+|\d+")


def polarity_sides(lowered: str) -> frozenset[str]:
    """The sides the text takes on each axis of opposites, as "axis:0" / "axis:1"."""
    found: set[tuple[str, int]] = set()
    tokens = _ENGLISH_TOKEN.findall(lowered)
    for position, token in enumerate(tokens):
        side = _SIDES.get(token)
        if side is not None and not (token == "min" and _follows_number(tokens, position)):
            found.add(side)
            continue
        particle = _PARTICLE_AXES.get(token)
        if particle is not None and _has_verb_before(tokens, position, _SWITCH_VERBS):
            found.add(particle)
            continue
        particle = _DIRECTION_PARTICLES.get(token)
        if particle is not None and _has_verb_before(tokens, position, _MOVE_VERBS):
            found.add(particle)
    found.update(_SIDES[word] for word in _HAN_POLARITY.findall(_HAN_NOT_POLAR.sub(" ", lowered)))
    return frozenset(f"{axis}:{side}" for axis, side in found)


def has_polarity_flip(first: frozenset[str], second: frozenset[str]) -> bool:
    """Some axis where each text takes exactly one side and the sides are opposite.

    A text that names both sides ("pros and cons", "upload or download") takes none.
    """
    for entry in first - second:
        axis, side = entry.split(":")
        opposite = f"{axis}:{1 - int(side)}"
        if opposite in second and opposite not in first and entry not in second:
            return True
    return False


def _follows_number(tokens: Sequence[str], position: int) -> bool:
    return position > 0 and tokens[position - 1].isdigit()  # "5 min" is a unit


def _has_verb_before(tokens: Sequence[str], position: int, verbs: frozenset[str]) -> bool:
    start = max(0, position - _PARTICLE_WINDOW)
    return any(token in verbs for token in tokens[start:position])
