"""Deciding where a request goes: pure logic, no I/O, no clocks of its own.

``settings``   the per-model routing configuration and its TOML readers
``estimates``  decaying TTFT / time-per-token estimates and recent-TTFT quantiles
``breaker``    circuit breakers (consecutive failures, error rate, Retry-After cooldown)
``budget``     the hedge budget over a sliding window
``affinity``   prompt-prefix keys and consistent hashing with bounded load
``homes``      each prefix key's home deployment, balanced by number of keys (LRU-bounded)
``deployment`` one deployment's live state: expected TTFT, cost, counters, snapshot
``pool``       one model's deployments: ranking (P2C / affinity / tiers) and bookkeeping
``models``     model names to routes (aliases, the wildcard); each route's deployments, once
``hybrid``     local or cloud, per request, for the hybrid model name
``shared``     what a replica shares with the fleet (its own observations and trips), and
               folding another replica's in

Every method takes ``now_s`` from its caller, so tests drive time by hand; the I/O that
carries decisions out lives in ``hasten.upstream.client`` and ``hasten.upstream.dispatch``.
"""
