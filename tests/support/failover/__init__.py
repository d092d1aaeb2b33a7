"""The failover conformance suite: scenarios against simulators on loopback, each with a
pass rule, scored pass / partial / safe-fail / fail. ``scenarios.CATALOGUE`` is the one list;
``tests/test_failover.py`` runs it quickly and ``bench/reliability/failover.py`` in full."""
