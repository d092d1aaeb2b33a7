"""hasten bench: a lean load generator for OpenAI-compatible endpoints.

Scripts use :func:`run_load`; the ``hasten bench`` command is :mod:`hasten.loadgen.cli`.
"""

from __future__ import annotations

from hasten.loadgen.report import LoadReport, Samples
from hasten.loadgen.runner import run_load
from hasten.loadgen.settings import LoadSettings
from hasten.loadgen.stats import Summary
from hasten.loadgen.workload import Prompt, WorkloadSpec

__all__ = ["LoadReport", "LoadSettings", "Prompt", "Samples", "Summary", "WorkloadSpec", "run_load"]
