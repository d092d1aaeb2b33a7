"""bench/agents/agents.py in its tiny mode: the JSON's shape, and the repeated task served
from hasten's cache on every API and path. No figure is held to a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "agents" / "agents.py"
TARGETS = {
    "chat": ["direct", "native"],
    "responses": ["direct", "native", "translated"],
    "messages": ["direct", "native", "translated"],
}


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", "--json"],
        capture_output=True, text=True, timeout=600, env=env, cwd=REPO, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_every_api_and_target_has_its_figures(result: dict[str, Any]) -> None:
    plan = result["plan"]
    num_turns = plan["turns_per_task"] * plan["tail_tasks"]
    assert result["benchmark"] == "agents"
    assert plan["apis"] == list(TARGETS)
    assert result["machine"]["cores"] == os.cpu_count()
    for api, targets in TARGETS.items():
        assert list(result["tail"][api]) == targets
        assert list(result["overhead"][api]) == targets
        for target in targets:
            row = result["tail"][api][target]
            assert row["ttft_ms"]["count"] == row["e2e_ms"]["count"] == num_turns
            assert 0 < row["ttft_ms"]["p50"] <= row["ttft_ms"]["p99"]
            assert row["ttft_ms"]["p50"] <= row["e2e_ms"]["p50"]
            assert row["task_s"]["count"] == plan["tail_tasks"]
            if target == "direct":
                assert "cache" not in row
            else:
                # First runs of fresh tasks: every turn went upstream.
                assert row["cache"] == {"miss": num_turns}
                assert set(result["overhead"][api][target]["added_e2e_ms"]) == {"p50", "p99"}


def test_the_repeated_task_is_served_from_the_cache(result: dict[str, Any]) -> None:
    plan = result["plan"]
    num_turns = plan["turns_per_task"] * plan["repeat_tasks"]
    for api, targets in TARGETS.items():
        repeat = result["repeat"][api]
        assert repeat["same_answers_as_first_run"] is True
        assert repeat["direct"]["turns"] == num_turns
        for target in targets[1:]:
            assert repeat[target]["cache"] == {"hit": num_turns}
            assert repeat[target]["speedup_vs_direct"] > 0


def test_goals_are_reported_for_each_api_and_path(result: dict[str, Any]) -> None:
    goals = result["goals"]
    keys = {f"{api}/{t}" for api, targets in TARGETS.items() for t in targets[1:]}
    for name, goal in (
        ("p99_ttft_ratio_direct_over_hasten", 3.0),
        ("repeat_speedup_vs_direct", 20.0),
        ("added_p50_miss_over_chat", 1.1),
    ):
        assert goals[name]["goal"] == goal
        assert set(goals[name]) - {"goal"} == keys
        assert all(isinstance(goals[name][key]["holds"], bool) for key in keys)
