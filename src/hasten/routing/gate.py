"""Each upstream's in-flight cap (``[upstreams.X] max_in_flight``): may one more attempt go?

One ``InFlightGate`` per upstream for the whole process, shared by every route and model
that sends to it, so the cap bounds what the upstream itself holds (the local engine's
running sequences plus its queue), not what one route's pool sees. An attempt takes a
``Slot`` before its request is sent and gives it back when its response is closed or the
send fails (``hasten.upstream.attempt``); a full gate refuses at once, never queues: the
router tries another deployment, or the client gets a 429 to retry (``UpstreamBusy``).

Pure counting: no clock, no I/O, no locks (the gateway's event loop is one thread).
"""

from __future__ import annotations


class Slot:
    """One attempt's place under its upstream's cap; ``release`` gives it back once, however
    many exits call it (a closed response, a failed send, a cancelled attempt)."""

    __slots__ = ("_gate",)

    def __init__(self, gate: InFlightGate) -> None:
        self._gate: InFlightGate | None = gate

    def release(self) -> None:
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.num_in_flight -= 1

    @property
    def is_held(self) -> bool:
        return self._gate is not None


class InFlightGate:
    """The attempts in flight to one upstream against ``max_in_flight`` (0: no cap, still
    counted)."""

    __slots__ = ("max_in_flight", "num_in_flight", "num_refused")

    def __init__(self, max_in_flight: int = 0) -> None:
        if max_in_flight < 0:
            raise ValueError(f"max_in_flight must be >= 0, got {max_in_flight}")
        self.max_in_flight = max_in_flight
        self.num_in_flight = 0
        self.num_refused = 0  # attempts refused as busy since the start (a counter)

    @property
    def is_full(self) -> bool:
        return 0 < self.max_in_flight <= self.num_in_flight

    def try_acquire(self) -> Slot | None:
        """A slot, or None (counted as a refusal) when the upstream is at its cap."""
        if self.is_full:
            self.num_refused += 1
            return None
        self.num_in_flight += 1
        return Slot(self)

    def snapshot(self) -> dict[str, int]:
        return {
            "in_flight": self.num_in_flight,
            "max_in_flight": self.max_in_flight,
            "busy_refusals": self.num_refused,
        }


class UpstreamGates:
    """Every upstream's gate, by upstream name, made on first use with its configured cap."""

    __slots__ = ("_gates",)

    def __init__(self) -> None:
        self._gates: dict[str, InFlightGate] = {}

    def gate(self, name: str, max_in_flight: int) -> InFlightGate:
        gate = self._gates.get(name)
        if gate is None:
            gate = self._gates[name] = InFlightGate(max_in_flight)
        return gate

    def items(self) -> list[tuple[str, InFlightGate]]:
        """Every gate made so far, by name (a copy: for a scrape or a snapshot)."""
        return sorted(self._gates.items())

    def snapshot(self) -> dict[str, dict[str, int]]:
        return {name: gate.snapshot() for name, gate in self.items()}
