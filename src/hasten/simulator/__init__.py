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
    GET  /v1/models[/{id}]      the configured model names
    GET  /sim/stats             counters as JSON (see `SimStats`, plus num_prefix_cache_blocks)
    POST /sim/reset             zero counters and reseed the RNG; `?clear_prefix_cache=1` also
                                empties the prefix cache
    GET  /sim/config            the current config as JSON
    POST /sim/config            JSON object of SimConfig fields to change; returns the new config

Length of a completion: `x-sim-tokens` if given, else max_tokens / max_completion_tokens (the
model "runs to the limit", finish_reason "length"), else `SimConfig.output_tokens`; max_tokens
always caps it; a `stop` sequence cuts it short (finish_reason "stop").

Network round trip: `rtt_ms` is part of every completion's first-token delay (jittered with
it); /v1/models[/{id}] and every /v1 error answer wait it alone (unjittered), as behind a real
network, so a client can tell the round trip from the TTFT. /sim/* paths never wait.

Per-request override headers (invalid values, or unknown `x-sim-*` names, give a 400):
    x-sim-ttft-ms: MS             exact delay before the first token (replaces rtt + ttft; no
                                  jitter or straggler); for embeddings the whole delay
    x-sim-decode-ms: MS           exact delay between tokens
    x-sim-tokens: N               completion length in tokens (still capped by max_tokens)
    x-sim-fail: 500|429|disconnect|none
                                  force a fault, or force none despite the configured rates
    x-sim-fail-after-chunks: N    disconnect: abort after N SSE events (default: the role chunk
                                  plus half the tokens); 500 on a stream: send N events, then an
                                  OpenAI error event and end without `[DONE]`. Non-stream
                                  requests get an up-front 500, or for disconnect half the body.
    x-sim-retry-after: S          seconds for a 429's `Retry-After` (and `retry-after-ms`)

Counting (GET /sim/stats): num_requests, num_requests_by_endpoint, num_stream_requests,
num_completed, num_cancelled (client went away before the response finished: noticed while the
simulator waits out latency, or when a send fails; a zero-latency response never waits, so a
client leaving during it is not seen), num_errors_injected (500s),
num_rate_limited, num_disconnects (injected), num_bad_requests, num_in_flight,
num_prompt_tokens, num_prefix_cache_hit_tokens, prefix_cache_hit_ratio,
num_completion_tokens (tokens actually sent), num_embedding_inputs, num_embedding_tokens,
num_prefix_cache_blocks. Only /v1/* requests are counted; every counted request ends in exactly
one of completed, cancelled, errors_injected, rate_limited, disconnects or bad_requests.
"""

from __future__ import annotations

from hasten.simulator.app import SimulatorApp
from hasten.simulator.config import SimConfig, config_from_mapping, load_toml_config

__all__ = ["SimConfig", "SimulatorApp", "build_app", "config_from_mapping", "load_toml_config"]


def build_app(config: SimConfig | None = None) -> SimulatorApp:
    """The simulator as an ASGI app; its `.state` holds the live config, RNG and counters."""
    return SimulatorApp(config if config is not None else SimConfig())
