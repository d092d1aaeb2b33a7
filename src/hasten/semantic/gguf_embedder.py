"""A GGUF embedder in a supervised child process: a native crash costs a call, not the gateway.

The child (``_serve``) prepares its model file, loads it (``gguf_encoder``), embeds a
one-text self-test and reports ready; then it answers lists of texts over a pipe with float32
rows. The parent (``GgufEmbedder``) is called from one worker thread (the semantic store's),
never the event loop. A call while the child still loads fails at once (the load goes on).
A call that finds the child dead, or that gets no answer within its timeout, raises
``EmbedderUnavailable`` (the store then treats the close call as a miss), and the child is
started again after the backoff of ``local.supervisor``'s ``RestartPolicy``; once that
policy gives up, every call raises at once.

The child is started with multiprocessing's ``spawn``, which imports the parent's main
script again: a program of its own that builds this embedder (rather than ``hasten serve``)
needs the usual ``if __name__ == "__main__":`` guard, as the benchmarks have.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import numpy as np

from hasten.local.supervisor import RestartPolicy, RestartSettings, describe_exit
from hasten.semantic.embedder import Vectors

_log = logging.getLogger("hasten.semantic")

# Texts per message and characters per text a caller may send (a verifier sends two).
MAX_TEXTS_PER_CALL = 256
MAX_TEXT_CHARS = 8192


class EmbedderUnavailable(RuntimeError):
    """The child is starting, restarting, crashed, hung or given up on."""


@dataclass(frozen=True, slots=True)
class ChildSettings:
    num_threads: int = 1
    # The first start may extract and quantise the model (about 10 s here).
    start_timeout_s: float = 180.0
    # A call's answer is awaited call_timeout_s plus per_text_timeout_s for each text.
    call_timeout_s: float = 2.0
    per_text_timeout_s: float = 0.25
    restart: RestartSettings = field(default_factory=RestartSettings)
    has_repack_buffers: bool = False  # ``gguf_encoder.EncoderParams``: off but in tests


def _serve(conn: Connection, prepare: Callable[[int], Path], settings: ChildSettings) -> None:
    """The child's loop: ready (or the error that prevents it), then one answer per call."""
    from hasten.semantic.gguf_encoder import EncoderParams, GgufEncoder, quiet_native_logs

    quiet_native_logs()
    try:
        path = prepare(settings.num_threads)
        encoder = GgufEncoder(
            EncoderParams(path, settings.num_threads, settings.has_repack_buffers)
        )
        encoder.encode(["self-test"])
    except Exception as exc:
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", encoder.dim))
    while True:
        try:
            texts = conn.recv()
        except EOFError:
            return
        if texts is None:
            return
        try:
            rows = encoder.encode(texts)
            conn.send(("ok", rows.tobytes()))
        except Exception as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class GgufEmbedder:
    """Embeds texts with a GGUF model running in a child process (``start`` it first)."""

    def __init__(
        self,
        name: str,
        prepare: Callable[[int], Path],
        *,
        settings: ChildSettings = ChildSettings(),
    ) -> None:
        """``prepare(num_threads)`` runs in the child and returns the model's path; it must
        be a module-level function (it is pickled to the child)."""
        self.name = name
        self.dim = 0
        self._prepare = prepare
        self._settings = settings
        self._policy = RestartPolicy(settings.restart)
        self._lock = threading.Lock()
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._started_s = 0.0
        self._not_before_s = 0.0
        self._is_given_up = False
        self._is_ready = False
        self.num_starts = 0

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def is_ready(self) -> bool:
        """Whether the child is loaded now; never waits (a caller holding the child counts
        as not ready)."""
        if not self._lock.acquire(blocking=False):
            return self._is_ready
        try:
            conn = self._conn
            if not self._is_ready and conn is not None and conn.poll(0):
                with contextlib.suppress(EmbedderUnavailable):
                    self._await_ready(0.0)
            return self._is_ready
        finally:
            self._lock.release()

    def start(self) -> None:
        """Starts the child (it loads in the background; ``wait_ready`` waits for it)."""
        with self._lock:
            if self._process is None and not self._is_given_up:
                self._spawn()

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Blocks until the child is ready; raises ``EmbedderUnavailable`` if it cannot be."""
        with self._lock:
            if self._process is None:
                self._spawn()
            self._await_ready(self._settings.start_timeout_s if timeout_s is None else timeout_s)

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One unit row per text. Raises ``EmbedderUnavailable`` when the child cannot answer
        in time (it is then restarted later), ``ValueError`` on input past
        the limits."""
        if len(texts) > MAX_TEXTS_PER_CALL or any(len(t) > MAX_TEXT_CHARS for t in texts):
            raise ValueError("too many or too long texts for one embedding call")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            if self._process is None:
                if self._is_given_up or time.monotonic() < self._not_before_s:
                    raise EmbedderUnavailable(f"{self.name} is down")
                self._spawn()
            if not self._is_ready:
                self._check_loaded()
            timeout_s = (
                self._settings.call_timeout_s + len(texts) * self._settings.per_text_timeout_s
            )
            conn = self._conn
            assert conn is not None
            try:
                conn.send(list(texts))
                reply = self._receive(conn, timeout_s)
            except (OSError, EOFError) as exc:
                self._on_failure(f"lost: {exc}")
                raise EmbedderUnavailable(f"{self.name} died during a call") from exc
            if reply[0] == "error":
                raise RuntimeError(f"{self.name}: {reply[1]}")
            rows = np.frombuffer(reply[1], dtype=np.float32)
            return rows.reshape(len(texts), self.dim)

    def close(self) -> None:
        with self._lock:
            self._stop()
            self._is_given_up = True

    def _spawn(self) -> None:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        process = context.Process(
            target=_serve,
            args=(child, self._prepare, self._settings),
            name=f"hasten-embedder-{self.name}",
            daemon=True,
        )
        process.start()
        child.close()
        self._process, self._conn = process, parent
        self._started_s = time.monotonic()
        self._is_ready = False
        self.num_starts += 1

    def _check_loaded(self) -> None:
        """A call while the child loads fails at once and leaves the load alone, unless the
        load has outlasted ``start_timeout_s``."""
        conn = self._conn
        if conn is not None and conn.poll(0):
            self._await_ready(0.0)
            return
        limit_s = self._settings.start_timeout_s
        if time.monotonic() - self._started_s < limit_s:
            raise EmbedderUnavailable(f"{self.name} is still loading")
        self._on_failure(f"not loaded within {limit_s:g} s")
        raise EmbedderUnavailable(f"{self.name} did not load within {limit_s:g} s")

    def _await_ready(self, timeout_s: float) -> None:
        if self._is_ready:
            return
        conn = self._conn
        if conn is None:
            raise EmbedderUnavailable(f"{self.name} is down")
        try:
            reply = self._receive(conn, timeout_s)
        except EOFError as exc:
            self._on_failure("exited while loading")
            raise EmbedderUnavailable(f"{self.name} exited while loading") from exc
        if reply[0] != "ready":
            self._stop()
            self._is_given_up = True
            _log.warning("semantic embedder %s is off: %s", self.name, reply[1])
            raise EmbedderUnavailable(f"{self.name} could not load: {reply[1]}")
        self.dim = int(reply[1])
        self._is_ready = True

    def _receive(self, conn: Connection, timeout_s: float) -> Any:
        if not conn.poll(timeout_s):
            self._on_failure(f"no answer within {timeout_s:g} s")
            raise EmbedderUnavailable(f"{self.name} did not answer within {timeout_s:g} s")
        return conn.recv()

    def _on_failure(self, why: str) -> None:
        process = self._process
        uptime_s = time.monotonic() - self._started_s
        self._stop()
        exit_code = None if process is None else process.exitcode
        how = why if exit_code is None else f"{why}, {describe_exit(exit_code)}"
        delay_s = self._policy.on_exit(time.monotonic(), uptime_s)
        if delay_s is None:
            self._is_given_up = True
            _log.warning("semantic embedder %s: %s; restarts used up, now off", self.name, how)
            return
        self._not_before_s = time.monotonic() + delay_s
        _log.warning("semantic embedder %s: %s; restarting in %.1f s", self.name, how, delay_s)

    def _stop(self) -> None:
        process, conn = self._process, self._conn
        self._process = self._conn = None
        self._is_ready = False
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.send(None)
            conn.close()
        if process is not None:
            process.join(timeout=1.0)
            if process.is_alive():
                process.kill()
                process.join(timeout=5.0)
