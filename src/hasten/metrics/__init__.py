"""Prometheus metrics and the per-request outcome seam (see ``outcome``)."""
