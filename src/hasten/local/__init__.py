"""The local edge model: llama.cpp's own ``llama-server`` as a supervised child of the gateway.

``command`` (llama-server's flags from ``[local]``, where its binary is), ``supervisor``
(start, self-test, restart policy, exit signals), ``gateway`` (upstream ``local`` and the
hybrid routes), ``server`` (the ``hasten local`` command: the same engine, alone).
"""
