"""The schedule of one streamed completion: which SSE events go out, and when each is due.

Pure: it yields `(due_ms, event_bytes, num_tokens)` from a plan and the generated choices; the
executor decides how to wait and where faults strike. `[DONE]` is left to the executor too,
since a fault must be able to withhold it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from hasten.simulator.generation import GeneratedChoice
from hasten.simulator.latency import LatencyPlan
from hasten.simulator.payloads import StreamEncoder

ScheduledEvent = tuple[float, bytes, int]


def stream_schedule(
    encoder: StreamEncoder,
    choices: Sequence[GeneratedChoice],
    plan: LatencyPlan,
    usage: dict[str, object] | None,
) -> Iterator[ScheduledEvent]:
    """Role chunks with the first token, then token steps (one chunk per choice that still has
    a token), then finish chunks and the optional usage chunk with the last token."""
    first_token_ms = plan.first_token_ms
    for index, choice in enumerate(choices):
        role = encoder.role(index, bool(choice.tool_calls))
        if role:
            yield first_token_ms, role, 0
    num_steps = max((len(choice.pieces) for choice in choices), default=0)
    if any(choice.tool_calls or choice.logprobs is not None for choice in choices):
        yield from _rich_tokens(encoder, choices, plan, num_steps)
    elif len(choices) == 1:
        yield from _single_choice_tokens(encoder, choices[0], plan)
    else:
        for step in range(num_steps):
            due_ms = plan.token_due_ms(step)
            for index, choice in enumerate(choices):
                if step < len(choice.pieces):
                    yield due_ms, encoder.content(index, choice.pieces[step]), 1
    end_ms = plan.total_ms(num_steps)
    for index, choice in enumerate(choices):
        yield end_ms, encoder.finish(index, choice.finish_reason), 0
    if usage is not None:
        yield end_ms, encoder.usage(usage), 0


def _single_choice_tokens(
    encoder: StreamEncoder, choice: GeneratedChoice, plan: LatencyPlan
) -> Iterator[ScheduledEvent]:
    """The common n=1 case, without scanning the choices at every step."""
    first_token_ms = plan.first_token_ms
    decode_ms = plan.decode_ms_per_token
    content = encoder.content
    for step, piece in enumerate(choice.pieces):
        yield first_token_ms + step * decode_ms, content(0, piece), 1


def _rich_tokens(
    encoder: StreamEncoder, choices: Sequence[GeneratedChoice], plan: LatencyPlan, num_steps: int
) -> Iterator[ScheduledEvent]:
    """Token steps of choices with tool calls or logprobs: off the plain-text fast path."""
    steps = [_choice_steps(encoder, index, choice) for index, choice in enumerate(choices)]
    for step in range(num_steps):
        due_ms = plan.token_due_ms(step)
        for choice_steps in steps:
            if step < len(choice_steps):
                events = choice_steps[step]
                for event in events[:-1]:
                    yield due_ms, event, 0
                yield due_ms, events[-1], 1


def _choice_steps(encoder: StreamEncoder, index: int, choice: GeneratedChoice) -> list[list[bytes]]:
    """Per token, its events: a tool call opens (id, name) with its first argument token."""
    if not choice.tool_calls:
        assert choice.logprobs is not None
        steps: list[list[bytes]] = []
        offset = 0
        for piece, entry in zip(choice.pieces, choice.logprobs, strict=True):
            steps.append([encoder.content_logprobs(index, piece, entry, offset)])
            offset += len(piece)
        return steps
    steps = []
    for call_index, (call, pieces) in enumerate(
        zip(choice.tool_calls, choice.call_pieces(), strict=True)
    ):
        for position, piece in enumerate(pieces):
            events = [encoder.tool_arguments(index, call_index, piece)]
            if position == 0:
                events.insert(0, encoder.tool_call(index, call_index, call))
            steps.append(events)
    return steps
