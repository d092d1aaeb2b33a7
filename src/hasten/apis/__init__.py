"""The client APIs hasten speaks besides Chat Completions, as pure values and translators.

No I/O, no asyncio, nothing from hasten's higher floors: parsed JSON (dicts) and bytes in,
parsed JSON and bytes out, ``hasten.errors`` for what a client did wrong.

    usage           ``Usage``: token counts shared by every API, read from and written to
                    each API's own usage object (cached input tokens mapped both ways)
    ids             fresh ``resp_``/``msg_`` ids, item ids derived from a response id
    fields          the 400s that name a parameter, shared by the request checks
    responses       the OpenAI Responses API: request check, stream events, merge, replay
    messages        the Anthropic Messages API: the same, plus ``count_tokens``
    responses_chat  Responses <-> Chat Completions: requests, answers, streams, errors
    messages_chat   Messages <-> Chat Completions: requests, answers, streams, errors

Translations build new dicts but may share nested values (a tool's schema, metadata) with
the request they read: copy before changing one in place.

A fourth API would be one more module like ``responses`` (its wire format) and one like
``responses_chat`` (its translation to and from chat, the pivot every API meets at).
"""
