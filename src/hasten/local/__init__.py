"""Local edge model engine: continuous batching on llama.cpp, served as an OpenAI upstream.

One concept per module: ``model`` (GGUF, tokenizer, chat template), ``sampling`` (per-request
sampling), ``textstream`` (detokenizing, stop sequences), ``scheduler`` (decides: admission,
prefix reuse, the next batch), ``threads`` (decides: CPU threads per step, from measured
step times), ``runner`` (executes a step on llama.cpp), ``engine`` (the engine thread and
the async API), ``protocol`` + ``app`` (OpenAI wire format over ASGI), ``config`` +
``server`` (settings and the ``hasten local`` command).
"""

from __future__ import annotations

import os

# llama.cpp's CPU backend runs each graph in an OpenMP team (libgomp). libgomp makes an
# idle worker spin up to 300k iterations (milliseconds) before sleeping, at every barrier
# and after every graph: on 2 cores that spinning steals the core the engine thread and
# the event loop need between two decodes. 10k spins kept the same speed on an idle core
# (301 vs 289 tok/s, 8 sequences, 2 threads). libgomp reads this once, when it is loaded,
# so it is set here, before any module of this package imports llama_cpp.
os.environ.setdefault("GOMP_SPINCOUNT", "10000")
