"""The long fuzz run: schemathesis cases from the gateway's own OpenAPI document against
``hasten serve`` in front of ``hasten simulate``, both real processes on loopback.

Counts requests and distinct bodies (a body generated twice is one case, not two), and
every answer that breaks the contract: a 5xx, or an error outside the OpenAI shape. Then
``--raw-cases`` bodies written as text, which the document's generator cannot produce: keys
written twice at any level and integers of any size (a duplicate must be a 400
``duplicate_key``, and only a duplicate).

    .venv/bin/python bench/reliability/fuzz.py --num-cases 50000 [--raw-cases 5000] [--json]
        [--hashes-out FILE] [--no-admin-key]

Two runs side by side use both cores; ``--hashes-out`` lets their distinct cases be counted
as one set (``sort -u a b | wc -l``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import secrets
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from bench.support.server_process import ServerProcess, free_port  # noqa: E402
from hasten.openapi import build_document  # noqa: E402
from tests.support.strategies import raw_requests  # noqa: E402

NUM_SLOWEST = 5
READ_TIMEOUT_S = 30.0
ADMIN_PATHS = ("/admin", "/stats")


class Tally:
    def __init__(self) -> None:
        self.num_requests = 0
        self.bodies: set[bytes] = set()
        self.statuses: Counter[int] = Counter()
        self.violations: list[dict[str, Any]] = []
        self.unsatisfiable: list[str] = []  # operation and mode without a single case

        # (latency_s, path, body, request id), the few slowest
        self.slowest: list[tuple[float, str, str, str]] = []

    def record(
        self, case: Any, response: requests.Response | None, latency_s: float, failure: str = ""
    ) -> None:
        """One answered case, or one that got no answer (``response`` None, ``failure`` why):
        a request the gateway never answers is a violation too."""
        self.num_requests += 1
        # repr, not JSON: generated integers may exceed 64 bits.
        raw = repr((case.method, case.path, case.query, case.body)).encode()
        self.bodies.add(hashlib.blake2b(raw, digest_size=16).digest())
        if len(self.slowest) < NUM_SLOWEST or latency_s > self.slowest[-1][0]:
            request_id = "" if response is None else _header(response, "x-hasten-request-id")
            self.slowest.append((latency_s, case.path, repr(case.body)[:200], request_id))
            self.slowest.sort(reverse=True)
            del self.slowest[NUM_SLOWEST:]
        if response is None:
            self.statuses[0] += 1
            problem: str | None = f"no answer: {failure}"
        else:
            self.statuses[response.status_code] += 1
            problem = _violation(response)
        if problem is not None and len(self.violations) < 20:
            self.violations.append(
                {"problem": problem, "path": case.path, "body": repr(case.body)[:300]}
            )
        elif problem is not None:
            self.violations.append({"problem": problem})


def _header(response: Any, name: str) -> str:
    """One header's value: schemathesis responses hold a list of values per name."""
    value = response.headers.get(name, "")
    return str(value[0] if isinstance(value, list) and value else value or "")


def _violation(response: requests.Response) -> str | None:
    if response.status_code >= 500:
        return f"status {response.status_code}: {response.content[:200]!r}"
    if response.status_code >= 400:
        try:
            error = orjson.loads(response.content)["error"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return f"status {response.status_code} without an OpenAI error body"
        if not isinstance(error, dict) or not {"message", "type", "param", "code"} <= set(error):
            return f"status {response.status_code}: error object missing fields"
    return None


def run(base_url: str, num_cases: int, admin_key: str | None) -> Tally:
    """Half the cases valid per the document, half invalid, spread over the operations
    that take a body (a GET without parameters has one case only). With ``admin_key`` the
    admin endpoints get it, so their bodies reach the validators instead of a 403."""
    schema = schemathesis.openapi.from_dict(build_document())
    operations = [result.ok() for result in schema.get_all_operations()]
    with_body = [op for op in operations if op.method.upper() == "POST"]
    per_run = max(1, num_cases // (2 * len(with_body)))
    session = requests.Session()
    tally = Tally()
    for operation in operations:
        is_post = operation in with_body
        for mode in GenerationMode if is_post else [GenerationMode.POSITIVE]:

            @given(case=operation.as_strategy(mode))
            @settings(
                max_examples=per_run if is_post else 1,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                database=None,
            )
            def one(case: Any) -> None:
                headers = None
                if admin_key is not None and case.path.startswith(ADMIN_PATHS):
                    headers = {"authorization": f"Bearer {admin_key}"}
                started_s = time.perf_counter()
                try:
                    response = case.call(
                        base_url=base_url,
                        session=session,
                        headers=headers,
                        timeout=READ_TIMEOUT_S,
                    )
                except requests.RequestException as exc:
                    failure = f"{type(exc).__name__}: {exc}"[:300]
                    tally.record(case, None, time.perf_counter() - started_s, failure)
                    return
                tally.record(case, response, time.perf_counter() - started_s)

            try:
                one()
            except Unsatisfiable:
                # schemathesis could build no case of this kind (an operation whose every
                # field is optional has no invalid body in some versions): said, not hidden.
                tally.unsatisfiable.append(f"{operation.method.upper()} {operation.path} {mode}")
    return tally


def _has_duplicate(raw: bytes) -> bool:
    found = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        if len({key for key, _ in items}) != len(items):
            found.append(True)
        return dict(items)

    json.loads(raw, object_pairs_hook=pairs)
    return bool(found)


def run_raw(base_url: str, num_cases: int, admin_key: str | None, tally: Tally) -> int:
    """Bodies written as text (``tests.support.strategies.raw_requests``: keys written twice
    at any level, integers of any size), which schemathesis cannot generate: a violation is
    a 5xx, an error outside the OpenAI shape, or a duplicate key answered other than with a
    400 ``duplicate_key`` (or such a 400 without one). Returns how many had a duplicate."""
    session = requests.Session()
    num_duplicates = 0

    @given(request=raw_requests())
    @settings(
        max_examples=num_cases,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def one(request: tuple[str, bytes]) -> None:
        nonlocal num_duplicates
        path, raw = request
        headers = {"content-type": "application/json"}
        if admin_key is not None and path.startswith(ADMIN_PATHS):
            headers["authorization"] = f"Bearer {admin_key}"
        case = _RawCase(path, raw)
        started_s = time.perf_counter()
        try:
            response = session.post(base_url + path, data=raw, headers=headers, timeout=30)
        except requests.RequestException as exc:
            tally.record(case, None, time.perf_counter() - started_s, type(exc).__name__)
            return
        tally.record(case, response, time.perf_counter() - started_s)
        is_duplicate = _has_duplicate(raw)
        num_duplicates += is_duplicate
        code = None
        if response.status_code >= 400:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                code = response.json()["error"]["code"]
        if (code == "duplicate_key") is not is_duplicate:
            tally.violations.append(
                {
                    "problem": f"duplicate {is_duplicate}, answered {code}",
                    "path": path,
                    "body": repr(raw[:300]),
                }
            )

    one()
    return num_duplicates


class _RawCase:
    """What ``Tally.record`` reads of a case, for a body written as text."""

    def __init__(self, path: str, raw: bytes) -> None:
        self.method, self.path, self.query, self.body = "POST", path, None, raw


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-cases", type=int, default=50_000)
    parser.add_argument(
        "--raw-cases",
        type=int,
        default=5_000,
        help="bodies written as text: duplicate keys, integers of any size",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--hashes-out", type=Path, help="write each distinct case's digest, to union several runs"
    )
    parser.add_argument(
        "--no-admin-key",
        action="store_true",
        help="run the gateway without an admin key (the admin endpoints then answer 403)",
    )
    args = parser.parse_args(argv)
    admin_key = None if args.no_admin_key else secrets.token_urlsafe(24)
    logs = Path(tempfile.mkdtemp(prefix="hasten-fuzz-"))
    sim_port, gateway_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("HASTEN_ADMIN_API_KEY", None)
    if admin_key is not None:
        env["HASTEN_ADMIN_API_KEY"] = admin_key
    python = sys.executable
    sim = ServerProcess(
        "simulator",
        [
            python,
            "-m",
            "hasten",
            "simulate",
            "--port",
            str(sim_port),
            "--ttft-ms",
            "0",
            "--decode-ms",
            "0",
        ],
        log_path=logs / "sim.log",
        env=env,
    )
    gateway = ServerProcess(
        "gateway",
        [
            *(python, "-m", "hasten", "serve", "--port", str(gateway_port)),
            *("--cache-backend", "memory", "--log-format", "json"),
            *("--upstream", f"http://127.0.0.1:{sim_port}/v1"),
        ],
        log_path=logs / "gateway.log",
        env=env,
    )
    started_s = time.perf_counter()
    try:
        sim.start()
        sim.wait_ready(f"http://127.0.0.1:{sim_port}/v1/models", 60)
        gateway.start()
        gateway.wait_ready(f"http://127.0.0.1:{gateway_port}/healthz", 60)
        base_url = f"http://127.0.0.1:{gateway_port}"
        tally = run(base_url, args.num_cases, admin_key)
        num_raw_duplicates = run_raw(base_url, args.raw_cases, admin_key, tally)
    finally:
        gateway.stop()
        sim.stop()
    # The gateway's own time for each request (its JSON access log): a slow case whose
    # gateway time is short was slow outside the gateway (the client, the machine).
    gateway_ms: dict[str, float] = {}
    for line in (logs / "gateway.log").read_text(errors="replace").splitlines():
        if line.startswith("{") and '"duration_ms"' in line:
            record = orjson.loads(line)
            gateway_ms[record.get("request_id", "")] = record["duration_ms"]
    if args.hashes_out is not None:
        args.hashes_out.write_text("".join(digest.hex() + "\n" for digest in tally.bodies))
    doc = {
        "num_requests": tally.num_requests,
        "num_distinct_cases": len(tally.bodies),
        "num_violations": len(tally.violations),
        "violations": tally.violations[:20],
        "has_admin_key": admin_key is not None,
        "unsatisfiable": tally.unsatisfiable,
        "num_raw_cases": args.raw_cases,
        "num_raw_with_duplicates": num_raw_duplicates,
        "statuses": dict(sorted(tally.statuses.items())),  # 0: no answer
        "slowest": [
            {
                "latency_ms": round(t * 1000, 1),
                "gateway_ms": gateway_ms.get(request_id),
                "request_id": request_id,
                "path": path,
                "body": body,
            }
            for t, path, body, request_id in tally.slowest
        ],
        "elapsed_s": round(time.perf_counter() - started_s, 1),
    }
    print(
        f"fuzz: {doc['num_requests']} requests, {doc['num_distinct_cases']} distinct cases, "
        f"{doc['num_violations']} violations (5xx or non-OpenAI errors) in {doc['elapsed_s']} s",
        file=sys.stderr if args.json else sys.stdout,
    )
    print(json.dumps(doc, indent=2 if args.json else None))
    return 1 if tally.violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
