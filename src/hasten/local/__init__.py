"""Local edge model engine: continuous batching on llama.cpp, served as an OpenAI upstream.

One concept per module: ``model`` (GGUF, tokenizer, chat template), ``sampling`` (per-request
sampling), ``textstream`` (detokenizing, stop sequences), ``scheduler`` (decides: admission,
prefix reuse, the next batch), ``runner`` (executes a step on llama.cpp), ``engine`` (the
engine thread and the async API), ``protocol`` + ``app`` (OpenAI wire format over ASGI),
``config`` + ``server`` (settings and the ``hasten local`` command).
"""
