"""The scenarios that need real processes: ``hasten serve`` replicas and a redis-server.

Simulators run in-thread (``ServerThread``); each gateway replica is a ``GatewayProcess``
with a TOML config (as a user runs it), its cache and ``[fleet]`` on one throwaway Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from hasten.config.fleet import DEFAULT_LEASE_S
from hasten.simulator import SimConfig, build_app
from tests.support.failover.client import ask
from tests.support.failover.lab import (
    DEMANDING_RETRY,
    DEMANDING_TIMEOUTS,
    MODEL,
    TTFT_TIMEOUT_S,
    answer_text,
    chat,
)
from tests.support.failover.verdict import (
    Expectation,
    Outcome,
    Verdict,
    judge,
    judge_replay,
    worst,
)
from tests.support.servers import GatewayProcess, ServerThread, redis_server

if TYPE_CHECKING:
    from tests.support.failover.scenarios import Run

# An answer of 40 tokens over about 2 s: long enough to break something in the middle.
SLOW_STREAM = SimConfig(ttft_base_ms=20.0, decode_ms_per_token=50.0, output_tokens=40)
STREAM_S = 2.1
BOUND_S = 15.0
# A follower (cross-replica coalescing) may wait out its leader's lease before it takes
# over and streams the answer itself.
ON_TIME_S = STREAM_S + DEFAULT_LEASE_S + 1.5


def replica_toml(sim_urls: Sequence[str], redis_url: str) -> str:
    """One model over the simulators (fallbacks in order), cache and fleet on Redis."""
    t, r = DEMANDING_TIMEOUTS, DEMANDING_RETRY
    names = [f"sim{i}" for i in range(len(sim_urls))]
    text = '[server]\nhost = "127.0.0.1"\nlog_level = "warning"\n\n'
    for name, url in zip(names, sim_urls, strict=True):
        text += (
            f'[upstreams.{name}]\nurl = "{url}"\nconnect_timeout_s = {t.connect_s}\n'
            f"first_byte_timeout_s = {t.first_byte_s}\nidle_timeout_s = {t.idle_s}\n"
            f"total_timeout_s = {t.total_s}\nmax_retries = {r.max_retries}\n"
            f"backoff_base_s = {r.backoff_base_s}\nbackoff_max_s = {r.backoff_max_s}\n\n"
        )
    fallbacks = ", ".join(f'"{n}"' for n in names[1:])
    text += f'[models."{MODEL}"]\nupstream = "{names[0]}"\nfallbacks = [{fallbacks}]\n\n'
    text += f'[models."{MODEL}".routing]\nttft_timeout_s = {TTFT_TIMEOUT_S}\n\n'
    text += f'[cache]\nbackend = "redis"\nredis_url = "{redis_url}"\n\n'
    text += f'[fleet]\nredis_url = "{redis_url}"\n'
    return text


@contextlib.contextmanager
def _sims(num_sims: int) -> Iterator[list[ServerThread]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(ServerThread(build_app(SLOW_STREAM))) for _ in range(num_sims)]


def _replica(config_path: Path) -> GatewayProcess:
    """Not started yet: entering its ``with`` starts it (and leaving stops it)."""
    return GatewayProcess("--config", str(config_path))


def _num_calls(sims: Sequence[ServerThread]) -> int:
    return sum(int(httpx.get(s.url + "/sim/stats").json()["num_requests"]) for s in sims)


async def redis_lost_mid_stream(run: Run) -> Verdict:
    """Two replicas, cache and fleet on one Redis. Replica 1's client starts a 2 s stream,
    replica 2's client asks the same 0.3 s later (with cross-replica coalescing it follows
    replica 1's stream through Redis), and redis-server stops 0.8 s in. Both clients must
    get the whole answer, and a new request after it too (each replica on its own)."""
    with _sims(2) as sims, tempfile.TemporaryDirectory(prefix="hasten-failover-") as workdir:
        redis = contextlib.ExitStack()
        redis_url = redis.enter_context(redis_server())
        config = Path(workdir) / "replica.toml"
        config.write_text(replica_toml([s.url + "/v1" for s in sims], redis_url))
        with redis, _replica(config) as first, _replica(config) as second:
            body = chat(run.question("redis_lost_mid_stream"))
            expected = Expectation(answer_text(body, SLOW_STREAM.output_tokens))
            leading = asyncio.ensure_future(ask(run.client, first.url, body, bound_s=BOUND_S))
            await asyncio.sleep(0.3)
            following = asyncio.ensure_future(ask(run.client, second.url, body, bound_s=BOUND_S))
            await asyncio.sleep(0.5)
            await asyncio.to_thread(redis.close)
            on_time_s = run.on_time(ON_TIME_S)
            streams = [judge(await task, expected, on_time_s) for task in (leading, following)]
            after = chat(run.question("redis_lost_mid_stream", 1))
            seen = await ask(run.client, second.url, after, bound_s=BOUND_S)
            expected_after = Expectation(answer_text(after, SLOW_STREAM.output_tokens))
            later = judge(seen, expected_after, on_time_s)
            replay = judge_replay(await ask(run.client, first.url, body, bound_s=BOUND_S), expected)
    found = worst([*streams, later, replay])
    note = f"replica 1: {streams[0].outcome}; replica 2: {streams[1].outcome}; after: "
    note += f"{later.outcome}; {found.note}".rstrip("; ")
    return Verdict(found.outcome, note, max(v.elapsed_s for v in streams))


async def replica_killed_mid_stream(run: Run) -> Verdict:
    """Replica 1 streams an answer; replica 2's client asks the same 0.3 s later; replica 1
    is SIGKILLed 0.8 s in. Its own client loses the connection (nobody can help that);
    replica 2's client must get the whole answer."""
    with (
        _sims(2) as sims,
        redis_server() as redis_url,
        tempfile.TemporaryDirectory(prefix="hasten-failover-") as workdir,
    ):
        config = Path(workdir) / "replica.toml"
        config.write_text(replica_toml([s.url + "/v1" for s in sims], redis_url))
        with _replica(config) as first, _replica(config) as second:
            body = chat(run.question("replica_killed_mid_stream"))
            expected = Expectation(answer_text(body, SLOW_STREAM.output_tokens))
            calls_before = _num_calls(sims)
            doomed = asyncio.ensure_future(ask(run.client, first.url, body, bound_s=BOUND_S))
            await asyncio.sleep(0.3)
            survivor = asyncio.ensure_future(ask(run.client, second.url, body, bound_s=BOUND_S))
            await asyncio.sleep(0.5)
            assert first.proc is not None
            first.proc.kill()
            seen = await survivor
            lost = await doomed
            num_calls = _num_calls(sims) - calls_before
    verdict = judge(seen, expected, run.on_time(ON_TIME_S))
    note = f"{num_calls} upstream calls; the killed replica's client: {lost.problem or 'done'}"
    if verdict.outcome is Outcome.PASS and num_calls > 2:
        return Verdict(Outcome.PARTIAL, f"{note} (> 2)", verdict.elapsed_s)
    return Verdict(verdict.outcome, f"{note}; {verdict.note}".rstrip("; "), verdict.elapsed_s)
