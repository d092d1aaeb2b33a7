"""nomic-embed-text-v1.5 rebuilt from split volumes: the pinned checks refuse damaged bytes,
and a damaged model file on disk is rebuilt, never loaded."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import itertools
import multiprocessing
import random
import zipfile
import zlib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from hasten.semantic import nomic
from hasten.semantic.nomic import ModelIntegrityError, SplitMember


def _split_zip(
    tmp_path: Path, payload: bytes, cuts: tuple[int, ...]
) -> tuple[SplitMember, list[Path]]:
    """A zip (a small member first, then ``payload`` deflated) cut into volumes at ``cuts``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("first.txt", b"x" * 1000)
        archive.writestr("models/model.gguf", payload)
        info = archive.getinfo("models/model.gguf")
    data = buffer.getvalue()
    bounds = (0, *cuts, len(data))
    volumes = []
    for index, (start, end) in enumerate(itertools.pairwise(bounds)):
        path = tmp_path / f"archive.zip.{index:03d}"
        path.write_bytes(data[start:end])
        volumes.append(path)
    member = SplitMember(
        volumes=(),
        header_offset=info.header_offset,
        name="models/model.gguf",
        compressed_bytes=info.compress_size,
        size_bytes=len(payload),
        crc32=zlib.crc32(payload),
        sha256=hashlib.sha256(payload).hexdigest(),
    )
    return member, volumes


def _payload(num_bytes: int) -> bytes:
    generator = random.Random(7)
    words = [bytes(generator.choices(range(97, 123), k=8)) for _ in range(500)]
    return b" ".join(generator.choices(words, k=num_bytes // 9))[:num_bytes]


def test_a_member_across_volumes_is_inflated_and_checked(tmp_path: Path) -> None:
    payload = _payload(3_000_000)
    member, volumes = _split_zip(tmp_path, payload, (1_500, 400_000, 700_000))
    dest = tmp_path / "out" / "model.gguf"
    nomic.extract(member, volumes, dest)
    assert dest.read_bytes() == payload
    assert [p.name for p in dest.parent.iterdir()] == ["model.gguf"]  # no temporary left


def test_a_damaged_volume_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    payload = _payload(2_000_000)
    member, volumes = _split_zip(tmp_path, payload, (300_000,))
    damaged = bytearray(volumes[1].read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    volumes[1].write_bytes(bytes(damaged))
    dest = tmp_path / "out" / "model.gguf"
    with pytest.raises((ModelIntegrityError, zlib.error)):
        nomic.extract(member, volumes, dest)
    assert list(dest.parent.iterdir()) == []


def test_pinned_values_that_differ_are_refused(tmp_path: Path) -> None:
    payload = _payload(200_000)
    member, volumes = _split_zip(tmp_path, payload, (50_000,))
    wrong_hash = dataclasses.replace(member, sha256="0" * 64)
    with pytest.raises(ModelIntegrityError, match="pinned"):
        nomic.extract(wrong_hash, volumes, tmp_path / "a.gguf")
    wrong_offset = dataclasses.replace(member, header_offset=member.header_offset + 1)
    with pytest.raises(ModelIntegrityError, match="pinned offset"):
        nomic.extract(wrong_offset, volumes, tmp_path / "b.gguf")
    assert not (tmp_path / "a.gguf").exists() and not (tmp_path / "b.gguf").exists()


def test_a_file_is_intact_only_with_its_matching_sidecar(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"weights")
    assert not nomic.is_intact(model)  # no sidecar
    (tmp_path / "m.gguf.sha256").write_text(hashlib.sha256(b"weights").hexdigest() + "\n")
    assert nomic.is_intact(model)
    model.write_bytes(b"weightz")
    assert not nomic.is_intact(model)


def _prepare_in_child(directory: Path) -> Path:
    # llama.cpp quantises: never in the pytest process (tests/conftest.py).
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(nomic.prepare_model, 2, directory).result(timeout=300)


def test_the_real_model_is_rebuilt_when_damaged_on_disk(tmp_path: Path) -> None:
    """The semantic-nomic extra's volumes, inflated, checked and quantised by llama.cpp."""
    path = _prepare_in_child(tmp_path)
    assert path.name == nomic.MODEL_FILE and nomic.is_intact(path)
    assert path.read_bytes()[:4] == b"GGUF"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".prepare.lock",
        path.name,
        path.name + ".sha256",
    ]
    original = path.stat().st_mtime_ns
    with path.open("r+b") as file:
        file.seek(path.stat().st_size // 2)
        file.write(b"\0\0\0\0")
    assert not nomic.is_intact(path)
    rebuilt = _prepare_in_child(tmp_path)
    assert rebuilt == path and nomic.is_intact(path) and path.stat().st_mtime_ns != original
