"""Build llama-cpp-python once, with a portable CPU feature set, into a wheel kept by flags.

Why not pip's own cache: pip keys a built wheel by the source distribution only, so a wheel
built with other CMAKE_ARGS (say, -march=native with llama.cpp's AMX kernels, which crash on
Sapphire Rapids and later) is silently reused. Here the wheel lives under a folder named by the
package version and a hash of the exact CMake flags, so a flag change rebuilds and nothing else
does.

The feature set: never -march=native and never AMX (llama.cpp's AMX matmul segfaults, its
issue #20824); AVX-512 (with VBMI, VNNI, BF16 where present) when the CPU has the AVX-512
foundation, else AVX2/FMA/F16C/BMI2, else plain SSE4.2. Only flags the CPU reports are turned
on, so the wheel runs on the machine that built it and on any with the same or more features.

Usage: python scripts/engine_wheel.py [--print-dir | --print-flags] [--wheel-dir DIR] [--native]
Prints the path of the wheel (building it first if it is missing).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

PACKAGE = "llama-cpp-python"
VERSION = "0.3.36"
DEFAULT_WHEEL_DIR = pathlib.Path.home() / ".cache" / "hasten" / "wheels"

# Always off: no native tuning, no AMX kernels, nothing the gateway does not use.
BASE_FLAGS = (
    "-DGGML_NATIVE=OFF",
    "-DGGML_AMX_TILE=OFF",
    "-DGGML_AMX_INT8=OFF",
    "-DGGML_AMX_BF16=OFF",
    "-DGGML_CPU_ALL_VARIANTS=OFF",
    "-DGGML_BACKEND_DL=OFF",
    "-DLLAVA_BUILD=OFF",
    "-DLLAMA_CURL=OFF",
)

# (cmake option, /proc/cpuinfo flags that must all be present)
AVX2_TIER = (
    ("GGML_SSE42", ("sse4_2",)),
    ("GGML_AVX", ("avx",)),
    ("GGML_AVX2", ("avx2",)),
    ("GGML_FMA", ("fma",)),
    ("GGML_F16C", ("f16c",)),
    ("GGML_BMI2", ("bmi2",)),
    ("GGML_AVX_VNNI", ("avx_vnni",)),
)
AVX512_TIER = (
    ("GGML_AVX512", ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd")),
    ("GGML_AVX512_VBMI", ("avx512f", "avx512vbmi")),
    ("GGML_AVX512_VNNI", ("avx512f", "avx512_vnni")),
    ("GGML_AVX512_BF16", ("avx512f", "avx512_bf16")),
)


def cpu_flags() -> frozenset[str]:
    """The x86 feature flags of this CPU (empty where /proc/cpuinfo has none)."""
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cmake_flags(flags: frozenset[str]) -> list[str]:
    """The CMake arguments for this CPU: every x86 option set explicitly, on or off."""
    args = list(BASE_FLAGS)
    for option, needed in AVX2_TIER + AVX512_TIER:
        is_on = all(flag in flags for flag in needed)
        args.append(f"-D{option}={'ON' if is_on else 'OFF'}")
    return args


# For measuring what the portable set costs (bench/local/engine_builds.py) on a CPU where
# -march=native is safe; never what `make` installs.
NATIVE_FLAGS = ("-DGGML_NATIVE=ON", "-DLLAVA_BUILD=OFF", "-DLLAMA_CURL=OFF")


def tier_name(args: list[str]) -> str:
    if "-DGGML_NATIVE=ON" in args:
        return "native"
    if "-DGGML_AVX512=ON" in args:
        return "avx512"
    if "-DGGML_AVX2=ON" in args:
        return "avx2"
    return "sse42"


def wheel_folder(wheel_dir: pathlib.Path, args: list[str]) -> pathlib.Path:
    digest = hashlib.sha256("\n".join([PACKAGE, VERSION, *args]).encode()).hexdigest()[:12]
    return wheel_dir / f"{PACKAGE}-{VERSION}-{tier_name(args)}-{digest}"


def find_wheel(folder: pathlib.Path) -> pathlib.Path | None:
    wheels = sorted(folder.glob("llama_cpp_python-*.whl"))
    return wheels[0] if wheels else None


def build(folder: pathlib.Path, args: list[str]) -> pathlib.Path:
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix="engine-wheel-", dir=folder.parent))
    staging.chmod(0o755)
    jobs = str(os.cpu_count() or 2)
    env = dict(os.environ, CMAKE_ARGS=" ".join(args), CMAKE_BUILD_PARALLEL_LEVEL=jobs)
    print(f"building {PACKAGE}=={VERSION} ({tier_name(args)}): {' '.join(args)}", file=sys.stderr)
    print("this takes 4-11 minutes on 2 cores, once per flag set", file=sys.stderr)
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-cache-dir",
        "--no-binary",
        PACKAGE,
        f"{PACKAGE}=={VERSION}",
        "-w",
        str(staging),
    ]
    try:
        # pip's progress goes to stderr: stdout carries only the wheel's path (callers
        # capture it with $(...)).
        subprocess.run(command, env=env, check=True, stdout=sys.stderr)
        (folder.parent / (folder.name + ".flags")).write_text("\n".join(args) + "\n")
        # Rename is atomic: a concurrent or interrupted build never leaves a half folder.
        if folder.exists():
            shutil.rmtree(staging)
        else:
            staging.rename(folder)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    wheel = find_wheel(folder)
    if wheel is None:
        raise SystemExit(f"no wheel was produced in {folder}")
    return wheel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel-dir", default=os.environ.get("HASTEN_WHEEL_DIR"))
    parser.add_argument("--print-flags", action="store_true")
    parser.add_argument("--print-dir", action="store_true")
    parser.add_argument(
        "--native", action="store_true", help="a -march=native build, for benchmarks only"
    )
    options = parser.parse_args()
    wheel_dir = pathlib.Path(options.wheel_dir) if options.wheel_dir else DEFAULT_WHEEL_DIR
    args = list(NATIVE_FLAGS) if options.native else cmake_flags(cpu_flags())
    folder = wheel_folder(wheel_dir, args)
    if options.print_flags:
        print(" ".join(args))
        return
    if options.print_dir:
        print(folder)
        return
    wheel = find_wheel(folder) or build(folder, args)
    print(wheel)


if __name__ == "__main__":
    main()
