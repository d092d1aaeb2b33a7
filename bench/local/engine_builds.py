"""What the portable llama.cpp build costs: raw batched decode, portable wheel vs -march=native.

Only meaningful on a CPU where the native build runs (no AMX: the native build crashes
on Sapphire Rapids and later, which is why `make` never installs it). The native wheel is
built once by ``scripts/engine_wheel.py --native`` and installed into its own venv under
bench/.venvs/llama-native; both builds then run ``bench/local/local.py --ceiling --no-servers``
(llama.cpp alone, 1/2/4/8 sequences, 1 and 2 threads) in alternating rounds.

    .venv/bin/python bench/local/engine_builds.py [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from hasten.config.local import default_model_path  # noqa: E402

NATIVE_VENV = ROOT / "bench" / ".venvs" / "llama-native"
PACKAGES = ("httpx", "jinja2", "numpy", "orjson")


def _wheel(*flags: str) -> str:
    command = [sys.executable, str(ROOT / "scripts" / "engine_wheel.py"), *flags]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()


def native_python() -> Path:
    python = NATIVE_VENV / "bin" / "python"
    if not python.exists():
        wheel = _wheel("--native")
        subprocess.run([sys.executable, "-m", "venv", str(NATIVE_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", wheel, *PACKAGES], check=True)
    return python


def ceiling(python: Path, model: Path) -> dict[str, dict[str, dict[str, float]]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    command = [str(python), str(ROOT / "bench" / "local" / "local.py"), "--ceiling", "--no-servers"]
    command += ["--model", str(model)]
    done = subprocess.run([*command, "--json"], check=True, capture_output=True, text=True, env=env)
    result: dict[str, dict[str, dict[str, float]]] = json.loads(done.stdout)["raw_decode_tok_s"]
    return result


def system_info(python: Path) -> str:
    code = "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    builds = {"portable": Path(sys.executable), "native": native_python()}
    model = default_model_path()
    runs: dict[str, list[dict[str, dict[str, dict[str, float]]]]] = {name: [] for name in builds}
    load_before = os.getloadavg()[0]
    for index in range(args.rounds):
        for name in builds if index % 2 == 0 else list(builds)[::-1]:
            runs[name].append(ceiling(builds[name], model))
    medians: dict[str, Any] = {}
    for name, results in runs.items():
        medians[name] = {
            measure: {
                threads: {
                    seqs: statistics.median(r[measure][threads][seqs] for r in results)
                    for seqs in results[0][measure][threads]
                }
                for threads in results[0][measure]
            }
            for measure in results[0]
        }
    ratios = {
        measure: {
            threads: {
                seqs: medians["portable"][measure][threads][seqs]
                / medians["native"][measure][threads][seqs]
                for seqs in medians["native"][measure][threads]
            }
            for threads in medians["native"][measure]
        }
        for measure in medians["native"]
    }
    doc = {
        "tok_s": medians,
        "portable_vs_native": ratios,
        "system_info": {name: system_info(python) for name, python in builds.items()},
        "rounds": args.rounds,
        "load_avg_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    # One thread per CPU second: the build's own speed, least disturbed by other load.
    flat = list(ratios["tok_per_cpu_s"]["1_threads"].values())
    print(
        f"portable / native, 1 thread, tokens per CPU second: median "
        f"{statistics.median(flat):.3f}, range {min(flat):.3f}-{max(flat):.3f}",
        file=sys.stderr if args.json else sys.stdout,
    )
    print(json.dumps(doc, indent=2 if args.json else None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
