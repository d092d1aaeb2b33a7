"""A gateway fleet on loopback: one redis-server, simulators, N ``hasten serve`` replicas
sharing that Redis through ``[fleet]``, and nginx balancing them round robin.

    def config(ends: Endpoints) -> str:  # every replica's TOML; [fleet] is appended
        return f'[upstreams.sim]\\nurl = "{ends.sims["sim"]}"\\n[models."*"]\\nupstream = "sim"\\n'

    with Fleet(tmp_path, config=config, simulators={"sim": ("--ttft-ms", "200")}) as fleet:
        response = httpx.post(fleet.url + "/v1/chat/completions", json=...)
        fleet.replica_index(response.headers[REPLICA_HEADER])  # which replica answered
        fleet.chat_calls("sim")  # upstream calls the simulator received

Every start-up wait is bounded, and everything started is stopped on exit, in reverse order,
whatever failed (a replica killed by the test is simply gone already).
"""

from __future__ import annotations

import json
import os
import signal
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.balancer import REPLICA_HEADER, Nginx
from tests.support.servers import (
    GatewayProcess,
    ProcessDied,
    SimulatorProcess,
    redis_server,
)

READY_TIMEOUT_S = 120.0
HTTP_TIMEOUT_S = 10.0
CHAT_ENDPOINT = "chat.completions"  # as /sim/stats counts it


@dataclass(frozen=True, slots=True)
class Endpoints:
    """What a replica's config needs to know: Redis and each simulator's /v1 URL."""

    redis_url: str
    sims: Mapping[str, str]


ConfigText = Callable[[Endpoints], str]


def fleet_table(redis_url: str, extra: Mapping[str, object] | None = None) -> str:
    """The ``[fleet]`` table every replica gets (``extra``: more keys, TOML scalars)."""
    lines = ["[fleet]", f'redis_url = "{redis_url}"']
    lines += [f"{key} = {json.dumps(value)}" for key, value in (extra or {}).items()]
    return "\n".join(lines) + "\n"


def get_json(url: str, *, method: str = "GET", body: object = None) -> dict[str, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            parsed: dict[str, Any] = json.loads(response.read())
            return parsed
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{method} {url}: {exc.code} {exc.read().decode()}") from None


class Fleet:
    """The whole fleet as a context manager (see the module docstring)."""

    def __init__(
        self,
        workdir: Path,
        *,
        config: ConfigText,
        simulators: Mapping[str, Sequence[str]],
        num_replicas: int = 3,
        fleet_options: Mapping[str, object] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self._config = config
        self._fleet_options = dict(fleet_options or {})
        self._env = dict(env or {})
        self.sims = {name: SimulatorProcess(*flags) for name, flags in simulators.items()}
        self.num_replicas = num_replicas
        self.replicas: list[GatewayProcess] = []
        self.nginx: Nginx | None = None
        self.redis_url = ""
        self._stack = ExitStack()
        self._redis_stack = ExitStack()

    @property
    def url(self) -> str:
        """The balancer's base URL (no /v1)."""
        assert self.nginx is not None, "the fleet is not started"
        return self.nginx.url

    @property
    def replica_urls(self) -> list[str]:
        return [replica.url for replica in self.replicas]

    def replica_index(self, replica_header: str) -> int:
        """Which replica (0-based) a response came from, by the balancer's header value."""
        # After a failed try nginx lists every replica it tried ("a, b"): the last answered.
        answered = replica_header.split(",")[-1].strip()
        for index, replica in enumerate(self.replicas):
            if answered == f"127.0.0.1:{replica.port}":
                return index
        raise AssertionError(f"{REPLICA_HEADER}: {replica_header!r} is no replica of this fleet")

    def start(self) -> Fleet:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.redis_url = self._redis_stack.enter_context(redis_server())
        self._stack.callback(self._redis_stack.close)
        for sim in self.sims.values():
            self._stack.callback(sim.stop)
            sim.start()
        endpoints = Endpoints(self.redis_url, {name: sim.url for name, sim in self.sims.items()})
        text = self._config(endpoints) + "\n" + fleet_table(self.redis_url, self._fleet_options)
        config_path = self.workdir / "hasten.toml"
        config_path.write_text(text)
        args = ("--host", "127.0.0.1", "--config", str(config_path), "--log-level", "warning")
        self.replicas = [GatewayProcess(*args, env=self._env) for _ in range(self.num_replicas)]
        for replica in self.replicas:
            self._stack.callback(replica.stop)
        # Started side by side: each replica spends a few seconds importing.
        with ThreadPoolExecutor(max_workers=self.num_replicas) as pool:
            for future in [pool.submit(r.start, READY_TIMEOUT_S) for r in self.replicas]:
                future.result()
        for replica in self.replicas:
            if replica.readyz().get("status") != "ready":
                raise ProcessDied(f"replica on {replica.port} is not ready\n{replica.stderr}")
        self.nginx = Nginx(self.workdir / "nginx", [r.port for r in self.replicas])
        self._stack.callback(self.nginx.stop)
        self.nginx.start()

    def stop(self) -> None:
        self._stack.close()

    def __enter__(self) -> Fleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def kill_replica(self, index: int) -> None:
        """SIGKILL: the replica dies mid-whatever, as a crashed or OOM-killed one does."""
        proc = self.replicas[index].proc
        assert proc is not None and proc.poll() is None, f"replica {index} is not running"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def stop_redis(self) -> None:
        """Redis goes away (the replicas must carry on, each on its own)."""
        self._redis_stack.close()

    def sim_url(self, name: str) -> str:
        return self.sims[name].url.removesuffix("/v1")

    def sim_stats(self, name: str) -> dict[str, Any]:
        return get_json(self.sim_url(name) + "/sim/stats")

    def chat_calls(self, *names: str) -> int:
        """Chat completion requests the named simulators (default: all) received, together."""
        return sum(
            self.sim_stats(name)["num_requests_by_endpoint"].get(CHAT_ENDPOINT, 0)
            for name in names or tuple(self.sims)
        )

    def set_sim(self, name: str, **fields: object) -> dict[str, Any]:
        """Changes a simulator's latency or fault knobs live (``POST /sim/config``)."""
        return get_json(self.sim_url(name) + "/sim/config", method="POST", body=fields)

    def reset_sims(self) -> None:
        for name in self.sims:
            get_json(self.sim_url(name) + "/sim/reset", method="POST", body={})
