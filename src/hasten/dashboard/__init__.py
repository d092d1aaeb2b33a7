"""The live dashboard: ``GET /dashboard`` (one self-contained page) and its JSON feed."""

from __future__ import annotations

from hasten.dashboard.route import DATA_PATH, PAGE_PATH, PATHS, Dashboard

__all__ = ["DATA_PATH", "PAGE_PATH", "PATHS", "Dashboard"]
