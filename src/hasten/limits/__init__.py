"""Per-key limits: requests and tokens per minute, concurrent requests, a spend budget.

``spec`` is what a key is allowed (``KeyLimits``); counting and enforcing it, exactly
across replicas through the fleet's Redis, lives beside it.
"""
