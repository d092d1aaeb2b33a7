"""Disk faults for chaos tests: a read-only SQLite file and garbage written into one."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import sqlite3
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# The WAL's shared-memory index is mmapped: an immutable one makes SQLite's next write to
# it a SIGBUS (a process crash, not a read-only disk), so it is left writable.
_READ_ONLY_SIDE_FILES = ("-wal", "-journal")
_BLOCK_BYTES = 4096  # SQLite's default page size


def sqlite_files(path: Path) -> list[Path]:
    """The database and whichever of its side files exist now."""
    candidates = [path, *(Path(f"{path}{side}") for side in _READ_ONLY_SIDE_FILES)]
    return [candidate for candidate in candidates if candidate.exists()]


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Makes a SQLite file (and its WAL) unwritable until the block ends.

    Root ignores file modes, so as root the files are made immutable (``chattr +i``), which
    binds root too and, unlike a mode, also refuses writes on descriptors already open.
    Otherwise ``chmod 0444``: it binds only descriptors opened afterwards.
    """
    files = sqlite_files(path)
    is_root = os.geteuid() == 0
    modes = {file: stat.S_IMODE(file.stat().st_mode) for file in files}
    if is_root:
        chattr = shutil.which("chattr")
        if chattr is None:
            raise RuntimeError("running as root needs chattr (e2fsprogs) for a read-only file")
        subprocess.run([chattr, "+i", *map(str, files)], check=True, capture_output=True)
    else:
        for file in files:
            file.chmod(0o444)
    try:
        yield
    finally:
        if is_root:
            subprocess.run(["chattr", "-i", *map(str, files)], check=True, capture_output=True)
        for file, mode in modes.items():
            file.chmod(mode)


def write_garbage(
    path: Path, *, seed: int, num_blocks: int = 8, include_header: bool = True
) -> int:
    """Overwrites ``num_blocks`` page-aligned 4 KiB blocks of a live SQLite file with random
    bytes, as a failing disk or a stray writer would; returns the bytes written.

    The WAL is checkpointed into the file first (from a connection of our own, as any
    process may): otherwise the live pages sit in the WAL and in the open connections' page
    caches, and garbage in the file would land only on pages nobody reads again. A
    checkpoint also tells those connections to drop their caches and read the file.
    ``include_header``: page 1 too (then it is "not a database" at all).
    """
    with contextlib.closing(sqlite3.connect(path, timeout=5.0)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    rng = random.Random(seed)
    num_pages = max(1, path.stat().st_size // _BLOCK_BYTES)
    first = 0 if include_header else min(1, num_pages - 1)
    pages = {rng.randrange(first, num_pages) for _ in range(num_blocks)}
    if include_header:
        pages.add(0)
    with path.open("r+b") as handle:
        for page in sorted(pages):
            handle.seek(page * _BLOCK_BYTES)
            handle.write(rng.randbytes(_BLOCK_BYTES))
        handle.flush()
        os.fsync(handle.fileno())
    return len(pages) * _BLOCK_BYTES
