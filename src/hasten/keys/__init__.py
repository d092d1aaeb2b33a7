"""Virtual gateway keys: records, their stores, the lookup cache and the admin API.

A virtual key is created, rotated and revoked at run time through ``/admin/keys`` (the
admin key), unlike the static keys of ``[server] api_keys``. ``record`` is one key (its
secret only as a SHA-256 digest), ``codec`` its checksummed bytes, ``fields`` the checks
its limits and models pass (shared with the static keys' config), ``store`` the store
protocol and the in-memory store, ``sqlite_store`` and ``redis_store`` the durable ones,
``lookup`` the request path's cache of resolved digests (pure, time passed in),
``directory`` the store behind that cache, ``access`` the allowed-models rule and
``endpoints`` the admin API.

This package root imports nothing: ``hasten.config`` imports ``fields`` while it loads.
"""
