"""The calibration tables behind ``target_precision``, per embedder and script.

Produced by ``bench/semantic_calibrate.py`` (see its docstring and docs/benchmarks.md).
"""

from __future__ import annotations

from hasten.semantic.calibration import Calibration

CALIBRATIONS: dict[str, Calibration] = {}
