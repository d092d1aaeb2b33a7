"""The local engine, llama-server with hasten's settings and the real SmolLM2-135M GGUF,
served over loopback and driven by ``openai``: the behaviour hasten relies on.

The engine runs in its own process, never in pytest's: a native crash fails these tests
with the child's signal and the rest of the suite runs. The model and the binary must be
installed (``make dev``): these tests fail, not skip, without them. Every generation is
kept short so the file runs in well under a minute.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator, Iterator

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from hasten.config.local import default_model_path
from tests.support.servers import EngineProcess

SYSTEM_PROMPT = "You are a terse assistant for a hardware store. " * 12
QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Name three colours."}]


# llama-server sometimes closes a kept-alive connection after a stream without answering the
# next request on it ("Server disconnected without sending a response"): nothing was sent
# back, so retrying is safe, and the gateway's transport does it itself (tests/upstream).
# A client talking to the engine directly must do the same.
CLIENT_RETRIES = 2
ENGINE_FLAGS = ("--n-ctx", "2048", "--n-threads", "1", "--max-seqs", "4")


@pytest.fixture(scope="module")
def engine() -> Iterator[EngineProcess]:
    with EngineProcess(*ENGINE_FLAGS) as running:
        yield running


@pytest.fixture(scope="module")
def client(engine: EngineProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{engine.url}/v1", api_key="unused", max_retries=CLIENT_RETRIES)


@pytest.fixture()
def async_client(engine: EngineProcess) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{engine.url}/v1", api_key="unused", max_retries=CLIENT_RETRIES
    )


def _wait_idle(engine: EngineProcess, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (health := engine.health())["num_running"] or health["num_waiting"]:
        assert time.monotonic() < deadline, health
        time.sleep(0.02)


def test_bundled_model_is_installed() -> None:
    assert default_model_path().is_file()


def test_models_endpoint_lists_local(client: openai.OpenAI) -> None:
    assert [model.id for model in client.models.list()] == ["local"]


def test_chat_completion_non_stream(client: openai.OpenAI) -> None:
    response = client.chat.completions.create(
        model="local", messages=QUESTION, max_tokens=12, temperature=0
    )
    choice = response.choices[0]
    assert response.object == "chat.completion"
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert response.usage is not None
    assert response.usage.prompt_tokens > 5
    assert 0 < response.usage.completion_tokens <= 12
    assert response.usage.total_tokens == (
        response.usage.prompt_tokens + response.usage.completion_tokens
    )


def test_stream_matches_non_stream_and_reports_usage(client: openai.OpenAI) -> None:
    expected = client.chat.completions.create(
        model="local", messages=QUESTION, max_tokens=16, temperature=0
    )
    chunks = list(
        client.chat.completions.create(
            model="local",
            messages=QUESTION,
            max_tokens=16,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    assert len({chunk.id for chunk in chunks}) == 1
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == expected.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == expected.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == expected.usage.completion_tokens  # type: ignore[union-attr]


def test_max_tokens_cuts_with_length(client: openai.OpenAI) -> None:
    response = client.chat.completions.create(
        model="local",
        messages=[{"role": "user", "content": "Write a long story about a dragon."}],
        max_tokens=5,
        temperature=0,
    )
    assert response.choices[0].finish_reason == "length"
    assert response.usage is not None and response.usage.completion_tokens == 5


def test_stop_sequence_ends_before_it(client: openai.OpenAI) -> None:
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "Write a long story about a dragon."}
    ]
    full = (
        client.chat.completions.create(
            model="local", messages=messages, max_tokens=20, temperature=0
        )
        .choices[0]
        .message.content
    )
    assert full is not None and len(full.split()) > 4
    stop = " " + full.split()[3]
    response = client.chat.completions.create(
        model="local", messages=messages, max_tokens=20, temperature=0, stop=[stop]
    )
    choice = response.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.content == full[: full.index(stop)]


def test_seed_reproduces_sampled_output(client: openai.OpenAI) -> None:
    def sample(seed: int) -> str | None:
        return (
            client.chat.completions.create(
                model="local",
                messages=[{"role": "user", "content": "Invent a name for a cat."}],
                max_tokens=16,
                temperature=1.0,
                seed=seed,
            )
            .choices[0]
            .message.content
        )

    assert sample(42) == sample(42)
    assert len({sample(seed) for seed in (1, 2, 3)}) > 1


def _ask_with_system(client: openai.OpenAI, question: str) -> openai.types.CompletionUsage:
    response = client.chat.completions.create(
        model="local",
        messages=[
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": question},
        ],
        max_tokens=4,
        temperature=0,
    )
    assert response.usage is not None
    return response.usage


def _cached_tokens(usage: openai.types.CompletionUsage) -> int:
    details = usage.prompt_tokens_details
    assert details is not None and details.cached_tokens is not None
    return details.cached_tokens


def test_shared_system_prompt_is_reused(client: openai.OpenAI) -> None:
    _ask_with_system(client, "Do you sell nails?")
    usage = _ask_with_system(client, "Do you sell paint?")
    assert _cached_tokens(usage) >= 100
    assert usage.prompt_tokens - _cached_tokens(usage) < 20


async def test_concurrent_requests_all_complete(
    async_client: openai.AsyncOpenAI, engine: EngineProcess
) -> None:
    async def one(index: int) -> tuple[str, int, str | None]:
        stream = await async_client.chat.completions.create(
            model="local",
            messages=[
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": f"Give me tip number {index}."},
            ],
            max_tokens=12,
            temperature=0.8,
            seed=index,
            stream=True,
            stream_options={"include_usage": True},
        )
        text, finish, completion_tokens = "", None, 0
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
            if chunk.usage is not None:
                completion_tokens = chunk.usage.completion_tokens
        return text, completion_tokens, finish

    steps_before = engine.health()["num_steps"]  # llama_decode calls
    results = await asyncio.gather(*(one(index) for index in range(6)))
    for text, completion_tokens, finish in results:
        assert finish in ("stop", "length")
        assert finish == "stop" or completion_tokens == 12
        assert text or finish == "stop"
    total_tokens = sum(tokens for _, tokens, _ in results)
    # Batched: far fewer decode steps than tokens produced.
    assert engine.health()["num_steps"] - steps_before < total_tokens


async def test_batched_greedy_output_equals_alone(async_client: openai.AsyncOpenAI) -> None:
    texts = (
        "The quick brown fox jumps over the lazy dog.",
        "Alice was beginning to get very tired of sitting by her sister.",
        "It was the best of times, it was the worst of times.",
        "Call me Ishmael. Some years ago, never mind how long precisely.",
    )
    # Copying prompts: greedy choices with wide margins, so float noise cannot flip them
    # (a prompt like "Count to 3." has two tokens within 0.1 logit and is fragile).
    prompts = [f"Repeat exactly: {text}" for text in texts]
    alone = [await _collect(async_client, prompt) for prompt in prompts[:2]]
    together = await asyncio.gather(*(_collect(async_client, prompt) for prompt in prompts))
    assert together[0].startswith("The quick brown fox")
    # Positions, sequence ids and shared prefixes are right: batching changes nothing.
    assert together[:2] == alone


async def _collect(client: openai.AsyncOpenAI, prompt: str) -> str:
    stream = await client.chat.completions.create(
        model="local",
        messages=[{"role": "user", "content": prompt}],
        temperature=0,
        max_tokens=10,
        stream=True,
    )
    return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])


@pytest.fixture(scope="module")
def tiny_server() -> Iterator[EngineProcess]:
    """One sequence: one unrelated request takes the only slot."""
    with EngineProcess("--n-ctx", "1024", "--n-threads", "1", "--max-seqs", "1") as engine:
        yield engine


def _long_stream(url: str) -> Generator[str, None, None]:
    body = {
        "model": "local",
        "messages": [{"role": "user", "content": "Write a very long essay about the sea."}],
        "max_tokens": 400,
        "stream": True,
        # Greedy: an unseeded draw may end the essay after a few tokens, before the test
        # has seen the request running.
        "temperature": 0,
    }
    with (
        httpx.Client(base_url=url, timeout=30) as http,
        http.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200
        yield from response.iter_lines()


def test_disconnect_cancels_and_frees_the_sequence(tiny_server: EngineProcess) -> None:
    engine = srv = tiny_server
    decoded_before = engine.health()["num_decoded_tokens"]
    lines = _long_stream(srv.url)
    assert next(line for line in lines if '"content":"' in line and '"content":""' not in line)
    assert engine.health()["num_running"] == 1
    lines.close()  # the client goes away mid-stream
    _wait_idle(engine, timeout_s=5)
    client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=CLIENT_RETRIES)
    response = client.chat.completions.create(model="local", messages=QUESTION, max_tokens=4)
    assert response.choices[0].message.content is not None
    assert engine.health()["num_decoded_tokens"] - decoded_before < 400


def test_a_shared_system_prompt_survives_an_unrelated_request(tiny_server: EngineProcess) -> None:
    # One slot: the unrelated request overwrites its KV; the RAM prompt cache (cache_ram_mib)
    # gives the system prompt back instead of computing it again.
    client = openai.OpenAI(
        base_url=f"{tiny_server.url}/v1", api_key="unused", max_retries=CLIENT_RETRIES
    )
    _ask_with_system(client, "Do you sell nails?")
    unrelated = "Tell me about the history of the printing press in Europe. " * 10
    client.chat.completions.create(
        model="local", messages=[{"role": "user", "content": unrelated}], max_tokens=2
    )
    usage = _ask_with_system(client, "Do you sell paint?")
    assert _cached_tokens(usage) >= 100
