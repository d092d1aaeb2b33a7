"""Build llama.cpp's own server (``llama-server``) once, with a portable CPU feature set.

The source: the llama.cpp that llama-cpp-python's source distribution vendors
(``vendor/llama.cpp``), fetched from PyPI with pip and checked against the SHA-256 pinned
here, so a build never depends on anything but a hash-checked registry file. Only the
``llama-server`` target is built, statically linked, with the web UI off (its build would
otherwise download UI assets) and no libcurl: nothing downloads at build or run time.

The CPU flags are exactly the ones scripts/engine_wheel.py picks from /proc/cpuinfo (never
-march=native, never AMX). The binary lives in a folder named by the source version and a
hash of the flags, so a flag change rebuilds and nothing else does; a build goes to a
staging folder renamed into place, so an interrupted build never leaves a half binary.

Usage: python scripts/llama_server.py [--print-dir | --print-flags] [--engine-dir DIR]
Prints the path of the binary (building it first if it is missing).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from engine_wheel import cmake_flags, cpu_flags, tier_name  # noqa: E402

PACKAGE = "llama-cpp-python"
VERSION = "0.3.36"
SDIST = f"llama_cpp_python-{VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
DEFAULT_ENGINE_DIR = pathlib.Path.home() / ".cache" / "hasten" / "llama-server"
BINARY = "llama-server"

# On top of the portable CPU flags: no web UI (its build fetches assets), a static binary
# (one file to cache and run), nothing but the server target's own needs.
SERVER_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DGGML_OPENMP=ON",
)


def build_flags() -> list[str]:
    cpu = [flag for flag in cmake_flags(cpu_flags()) if not flag.startswith("-DLLAVA_BUILD")]
    return [*cpu, *SERVER_FLAGS]


def engine_folder(engine_dir: pathlib.Path, args: list[str]) -> pathlib.Path:
    digest = hashlib.sha256("\n".join([PACKAGE, VERSION, *args]).encode()).hexdigest()[:12]
    return engine_dir / f"{VERSION}-{tier_name(args)}-{digest}"


def fetch_sdist(into: pathlib.Path) -> pathlib.Path:
    """The sdist, through pip (its cache, its index), then checked against the pinned hash."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        f"{PACKAGE}=={VERSION}",
        "-d",
        str(into),
    ]
    # pip prepares the sdist's metadata in an isolated build env (scikit-build-core from
    # PyPI; no compile): seconds, and the file then sits in pip's cache for the next time.
    subprocess.run(command, check=True, stdout=sys.stderr)
    sdist = into / SDIST
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise SystemExit(f"{SDIST}: sha256 {digest}, expected {SDIST_SHA256}")
    return sdist


def build(folder: pathlib.Path, args: list[str]) -> pathlib.Path:
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix="build-", dir=folder.parent))
    jobs = str(os.cpu_count() or 2)
    print(f"building llama-server from {SDIST} ({tier_name(args)}): {' '.join(args)}",
          file=sys.stderr)
    started_s = time.monotonic()
    try:
        sdist = fetch_sdist(staging)
        with tarfile.open(sdist) as archive:
            archive.extractall(staging / "src", filter="data")
        source = staging / "src" / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"
        build_dir = staging / "build"
        subprocess.run(
            ["cmake", "-S", str(source), "-B", str(build_dir), "-G", "Ninja", *args],
            check=True,
            stdout=sys.stderr,
        )
        subprocess.run(
            ["cmake", "--build", str(build_dir), "--target", BINARY, "-j", jobs],
            check=True,
            stdout=sys.stderr,
        )
        ready = staging / "ready"
        ready.mkdir()
        shutil.copy2(build_dir / "bin" / BINARY, ready / BINARY)
        (ready / "flags").write_text("\n".join(args) + "\n")
        (ready / "build_s").write_text(f"{time.monotonic() - started_s:.0f}\n")
        # Rename is atomic: a concurrent or interrupted build never leaves a half folder.
        if not folder.exists():
            ready.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"built in {time.monotonic() - started_s:.0f} s", file=sys.stderr)
    return folder / BINARY


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine-dir", default=os.environ.get("HASTEN_ENGINE_DIR"))
    parser.add_argument("--print-flags", action="store_true")
    parser.add_argument("--print-dir", action="store_true")
    options = parser.parse_args()
    engine_dir = pathlib.Path(options.engine_dir) if options.engine_dir else DEFAULT_ENGINE_DIR
    args = build_flags()
    folder = engine_folder(engine_dir, args)
    if options.print_flags:
        print(" ".join(args))
        return
    if options.print_dir:
        print(folder)
        return
    binary = folder / BINARY
    if not binary.is_file():
        binary = build(folder, args)
    print(binary)


if __name__ == "__main__":
    main()
