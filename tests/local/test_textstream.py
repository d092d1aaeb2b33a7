"""Unit tests for hasten.local.textstream: stop sequences held back, split UTF-8 joined."""

from __future__ import annotations

from hasten.local.textstream import TextStream


def test_text_stream_holds_back_a_possible_stop_then_releases_it() -> None:
    stream = TextStream(("END",))
    assert stream.feed(b"hello E").text == "hello "
    delta = stream.feed(b"x")
    assert (delta.text, delta.is_stopped) == ("Ex", False)


def test_text_stream_stops_across_tokens_and_drops_the_stop() -> None:
    stream = TextStream(("\n\n", "END"))
    texts = [stream.feed(piece) for piece in (b"one E", b"N", b"D and more")]
    assert "".join(delta.text for delta in texts) == "one "
    assert texts[-1].is_stopped
    assert stream.feed(b"more").text == ""
    assert stream.finish() == ""


def test_text_stream_joins_split_utf8_and_flushes_at_the_end() -> None:
    stream = TextStream(("zz",))
    encoded = "née z".encode()
    out = [stream.feed(encoded[:2]).text, stream.feed(encoded[2:]).text]
    assert "".join(out) + stream.finish() == "née z"
