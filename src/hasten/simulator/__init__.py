"""`hasten simulate`: an OpenAI-compatible upstream with a configurable latency model.

Used as the upstream for tests and benchmarks. Text is generated deterministically word by word
(a "token" is a word): the same model + messages/prompt + seed always yields the same text.
Every latency and fault knob in `SimConfig` defaults to zero, so by default the simulator only
measures the caller's own overhead.

Endpoints
    POST /v1/chat/completions   stream (SSE, `chat.completion.chunk`) and non-stream; honours
                                max_tokens / max_completion_tokens, n, stop, seed,
                                stream_options.include_usage; continues a last assistant
                                message given with `continue_final_message: true` (vLLM) or
                                `prefix: true` on it (DeepSeek): the answer is what follows it
    POST /v1/completions        the same for legacy `text_completion`
    POST /v1/embeddings         unit vectors from a hash of (model, input); string or list input,
                                `dimensions`, encoding_format float or base64
    POST /v1/responses          the OpenAI Responses API, stream (typed SSE events with
                                sequence numbers, no [DONE]) and not; function tools,
                                instructions, max_output_tokens; `store` (default true) keeps
                                the answer for `previous_response_id` (an unknown one is a 400
                                `previous_response_not_found`); `background: true` is a 400
    GET/DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items   stored answers
    POST /v1/messages           the Anthropic Messages API, stream and not: custom tools,
                                system, stop_sequences (stop_reason `stop_sequence`), a final
                                assistant turn continued (prefill); errors in Anthropic's shape
    POST /v1/messages/count_tokens   the input tokens a Messages answer would report
    GET  /v1/models[/{id}]      the configured model names
    GET  /sim/stats             counters as JSON (see `SimStats`, plus num_prefix_cache_blocks)
    POST /sim/reset             zero counters and reseed the RNG; `?clear_prefix_cache=1` also
                                empties the prefix cache
    GET  /sim/config            the current config as JSON
    POST /sim/config            JSON object of SimConfig fields to change; returns the new config
    POST /sim/burst             a 5xx burst: `{"num_requests": N, "status": 503}` (status 500 by
                                default): the next N completion/embedding requests fail with
                                it, then the simulator recovers; N = 0 ends it; /sim/reset too

Length of a completion: `x-sim-tokens` if given, else max_tokens / max_completion_tokens (the
model "runs to the limit", finish_reason "length"; `runs_to_max_tokens = false` in the
[simulator] table: it only caps), else `SimConfig.output_tokens`; max_tokens
always caps it; a `stop` sequence cuts it short (finish_reason "stop"). On the Responses and
Messages APIs the limit only caps (agents set large ones): `x-sim-tokens` or output_tokens.

Tools, on every API: a request offering function tools is answered with a call to each (the
first only with `parallel_tool_calls: false`, the named one for a named `tool_choice`, none
for `"none"`), its arguments filled from the tool's JSON schema (`simulator/arguments.py`);
once the turn carries a tool result, with `tool_choice` absent or `"auto"`, the answer is
text, so an agent's loop (call, result, answer) ends; `"required"` keeps calling.
`max_tool_calls` (`--max-tool-calls`) caps the calls one answer makes: 1 calls the first tool
only, 0 none (every answer is text).

Every API path also answers without its /v1 prefix. The Responses and Messages answers are
the chat generation for the same turns, translated event by event (hasten.apis), on the same
latency plan and faults; a mid-stream 500 ends a Responses stream with `response.failed` and
a Messages stream with an `error` event, and fault positions count that API's events.

Provider prompt caches (`simulator/native.py` says how prompts are tokenised): chat and
Responses cache every full block of the prompt automatically (`prompt_tokens_details.
cached_tokens`, `input_tokens_details.cached_tokens`); Messages caches only up to its
`cache_control` breakpoints, no prefix shorter than `messages_cache_min_tokens`, reporting
`cache_creation_input_tokens` and `cache_read_input_tokens`. Cached tokens prefill at
`prefill_cached_ms_per_token` instead of `prefill_ms_per_token`, which is how they lower TTFT.

Network round trip: `rtt_ms` is part of every completion's first-token delay (jittered with
it); /v1/models[/{id}] and every /v1 error answer wait it alone (unjittered), as behind a real
network, so a client can tell the round trip from the TTFT. /sim/* paths never wait. The
Responses and Messages streams open (response.created, message_start) after `rtt_ms`.

Latency draws (`draw_by`): "arrival" (the default) draws each request's jitter and straggler
from one seeded stream in arrival order; "trace" draws them from the request's W3C
`traceparent` trace id and how many times that caller (trace id and parent span) has sent it.
Two systems sent the same traced request then face the same draw (a direct call and a
gateway's first attempt: the same straggler), and a gateway's hedge or retry of it, the same
caller sending again, draws afresh. Requests without a valid traceparent draw by arrival.

Per-request override headers (invalid values, or unknown `x-sim-*` names, give a 400):
    x-sim-ttft-ms: MS             exact delay before the first token (replaces rtt + ttft; no
                                  jitter or straggler); for embeddings the whole delay
    x-sim-decode-ms: MS           exact delay between tokens
    x-sim-tokens: N               completion length in tokens (still capped by max_tokens)
    x-sim-fail: 500|429|disconnect|silent|hang|malformed|truncate|none
                                  force a fault, or force none despite the configured rates
                                  (each has a rate in SimConfig: error_rate, rate_limit_rate,
                                  disconnect_rate, silent_rate, hang_rate, malformed_rate,
                                  truncate_rate). silent: read the request, never answer; hang:
                                  200 and its headers, then nothing (both until the client
                                  leaves); malformed: an event that is not JSON mid-stream,
                                  the rest intact, or a 200 body that is not JSON; truncate:
                                  the body ends cleanly (no abort) halfway through an event, or
                                  halfway through the JSON of a whole body
    x-sim-fail-after-chunks: N    disconnect: abort after N SSE events (default: the role chunk
                                  plus half the tokens); 500 on a stream: send N events, then an
                                  OpenAI error event and end without `[DONE]`; malformed: the
                                  bad event comes before event N; truncate: N events, then half
                                  of the next. Non-stream requests get an up-front 500, or for
                                  disconnect half the body.
    x-sim-retry-after: S          seconds for a 429's `Retry-After` (and `retry-after-ms`)

Counting (GET /sim/stats): num_requests, num_requests_by_endpoint, num_stream_requests,
num_completed, num_cancelled (client went away before the response finished: noticed while the
simulator waits out latency, or when a send fails; a zero-latency response never waits, so a
client leaving during it is not seen), num_errors_injected (500s),
num_rate_limited, num_disconnects (injected), num_stalls (silent or hang, ended when the
client left), num_corrupted (malformed or truncated), num_bad_requests, num_in_flight,
num_prompt_tokens, num_prefix_cache_hit_tokens, prefix_cache_hit_ratio,
num_completion_tokens (tokens actually sent), num_embedding_inputs, num_embedding_tokens,
num_prefix_cache_blocks. Only /v1/* requests are counted; every counted request ends in exactly
one of completed, cancelled, errors_injected, rate_limited, disconnects, stalls, corrupted or
bad_requests.
"""

from __future__ import annotations

from hasten.simulator.app import SimulatorApp
from hasten.simulator.config import SimConfig, config_from_mapping, load_toml_config

__all__ = ["SimConfig", "SimulatorApp", "build_app", "config_from_mapping", "load_toml_config"]


def build_app(config: SimConfig | None = None) -> SimulatorApp:
    """The simulator as an ASGI app; its `.state` holds the live config, RNG and counters."""
    return SimulatorApp(config if config is not None else SimConfig())
