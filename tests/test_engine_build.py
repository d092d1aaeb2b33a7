"""scripts/llama_server.py: the llama-server build is keyed by source version and flags."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from hypothesis import given
from hypothesis import strategies as st

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def _load() -> ModuleType:
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location("llama_server", SCRIPTS / "llama_server.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(SCRIPTS))


build = _load()
CPU_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "avx512f", "avx512bw", "amx_int8")


def test_the_flags_are_portable_and_name_the_folder(tmp_path: Path) -> None:
    args = build.build_flags()
    assert "-DGGML_NATIVE=OFF" in args and "-DGGML_AMX_INT8=OFF" in args
    assert {"-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF"} <= set(args)
    folder = build.engine_folder(tmp_path, args)
    assert folder.parent == tmp_path and folder.name.startswith(f"{build.VERSION}-")
    assert len(build.SDIST_SHA256) == 64


@given(st.sets(st.sampled_from(CPU_FLAGS)), st.sets(st.sampled_from(CPU_FLAGS)))
def test_a_flag_change_rebuilds_and_nothing_else_does(first: set[str], second: set[str]) -> None:
    base = Path("/cache")
    args_1 = [*build.cmake_flags(frozenset(first)), *build.SERVER_FLAGS]
    args_2 = [*build.cmake_flags(frozenset(second)), *build.SERVER_FLAGS]
    assert "-DGGML_AMX_INT8=ON" not in args_1  # whatever the CPU says
    same_folder = build.engine_folder(base, args_1) == build.engine_folder(base, args_2)
    assert same_folder == (args_1 == args_2)
