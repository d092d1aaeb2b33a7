"""``/admin/*``: the operator's API, with its own key (``cache``: invalidate, import,
report a wrong hit, stats, routing state; ``keys``: virtual keys)."""
