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
    for index in range(len(choices)):
        role = encoder.role(index)
        if role:
            yield first_token_ms, role, 0
    num_steps = max((len(choice.pieces) for choice in choices), default=0)
    if len(choices) == 1:
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
