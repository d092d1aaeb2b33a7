"""The fleet: what gateway replicas share through one Redis (``[fleet]``).

``link`` is the one Redis connection the fleet's features use, and the one place that
decides Redis is away (each feature then falls back to the replica's own view).
"""
