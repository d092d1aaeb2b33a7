"""A loopback port whose connects time out instead of being refused: DNS-style black holes.

A name that resolves to an address nobody routes, or a firewall that drops packets, makes a
client's ``connect`` hang until its own timeout; on loopback a closed port answers with a RST
at once (refused), which is a different failure. Without root (no iptables) the honest way
to get a silent drop on 127.0.0.1 is a listener that never accepts, whose accept queue is
full: Linux then drops every further SYN (``ListenOverflows``), and the connecting side
retransmits it until it gives up. ``Blackhole`` fills the queue with connections of its
own and checks that a fresh connect really times out before handing the port out.
"""

from __future__ import annotations

import contextlib
import socket
import time

# Connections the kernel admits before the queue of a ``listen(0)`` socket is full; a few
# more are tried in case a kernel admits more, each checked.
MAX_FILLERS = 16
PROBE_TIMEOUT_S = 0.3
FILL_SETTLE_S = 0.02


class Blackhole:
    """``with Blackhole() as hole:`` ``hole.url`` is an http:// URL that never connects."""

    def __init__(self) -> None:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._fillers: list[socket.socket] = []

    def start(self) -> Blackhole:
        self._listener.listen(0)
        for _ in range(MAX_FILLERS):
            if connect_times_out(self.port, PROBE_TIMEOUT_S):
                return self
            self._fill_one()
        self.stop()
        raise RuntimeError("could not fill the accept queue: connects to it still succeed")

    def _fill_one(self) -> None:
        filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", self.port))
        self._fillers.append(filler)
        time.sleep(FILL_SETTLE_S)  # the handshake completes in the kernel, off our thread

    def stop(self) -> None:
        for filler in self._fillers:
            filler.close()
        self._fillers.clear()
        self._listener.close()

    def __enter__(self) -> Blackhole:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def connect_times_out(port: int, timeout_s: float) -> bool:
    """True when a connect to 127.0.0.1:``port`` neither succeeds nor is refused in time."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(timeout_s)
        try:
            probe.connect(("127.0.0.1", port))
        except TimeoutError:
            return True
        except OSError:
            return False  # refused or reset: not a black hole
        return False
