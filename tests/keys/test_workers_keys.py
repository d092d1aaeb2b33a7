"""``hasten serve --workers 2`` with ``[keys] sqlite_path``, as a user runs it: a key created
through one worker process works on the other, and a revocation through one is refused by
the other within a bounded wait (the shared SQLite file and the lookup cache's TTL)."""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from typing import Any

from hasten.simulator import SimConfig, build_app
from tests.support.gateway import chat_body
from tests.support.servers import GatewayProcess, ServerThread

ADMIN_KEY = "workers-keys-admin-key-0123456789"
MAX_WAIT_S = 20.0


class _Worker:
    """One kept-alive connection: it stays with the worker process that accepted it."""

    def __init__(self, port: int) -> None:
        self.http = http.client.HTTPConnection("127.0.0.1", port, timeout=20)

    def call(self, method: str, path: str, secret: str, body: Any = None) -> tuple[int, Any]:
        headers = {"content-type": "application/json", "authorization": f"Bearer {secret}"}
        self.http.request(
            method, path, body=None if body is None else json.dumps(body), headers=headers
        )
        response = self.http.getresponse()
        return response.status, json.loads(response.read())

    def pid(self) -> int:
        status, body = self.call("GET", "/readyz", ADMIN_KEY)
        assert status == 200, body
        return int(body["worker"]["pid"])


def _two_workers(port: int) -> tuple[_Worker, _Worker]:
    by_pid: dict[int, _Worker] = {}
    deadline = time.monotonic() + 60
    while len(by_pid) < 2:
        assert time.monotonic() < deadline, f"saw only workers {sorted(by_pid)}"
        worker = _Worker(port)
        try:
            pid = worker.pid()
        except OSError:
            time.sleep(0.05)
            continue
        if pid in by_pid:
            worker.http.close()
        else:
            by_pid[pid] = worker
    a, b = by_pid.values()
    return a, b


def _chat(worker: _Worker, secret: str) -> int:
    status, _ = worker.call("POST", "/v1/chat/completions", secret, chat_body("which worker?"))
    return status


def test_a_key_made_on_one_worker_is_known_and_revoked_on_the_other(tmp_path: Path) -> None:
    with ServerThread(build_app(SimConfig(ttft_base_ms=0, decode_ms_per_token=0))) as sim:
        config = tmp_path / "hasten.toml"
        config.write_text(
            f'[server]\nworkers = 2\nadmin_api_key_env = "KEYS_ADMIN_KEY"\n'
            f'[upstreams.sim]\nurl = "{sim.url}/v1"\n'
            f'[models.sim-model]\nupstream = "sim"\n'
            f'[keys]\nenabled = true\nsqlite_path = "{tmp_path / "keys.sqlite3"}"\n'
        )
        env = {"KEYS_ADMIN_KEY": ADMIN_KEY}
        with GatewayProcess("--config", str(config), env=env) as gateway:
            a, b = _two_workers(gateway.port)
            status, created = a.call("POST", "/admin/keys", ADMIN_KEY, {"tenant": "w"})
            assert status == 201, created
            assert _chat(b, created["secret"]) == 200
            status, _ = a.call("DELETE", f"/admin/keys/{created['id']}", ADMIN_KEY)
            assert status == 200
            assert _chat(a, created["secret"]) == 401
            deadline = time.monotonic() + MAX_WAIT_S
            while _chat(b, created["secret"]) != 401:
                assert time.monotonic() < deadline, "worker B still accepts the revoked key"
                time.sleep(0.05)
        assert created["secret"] not in gateway.stderr
