"""The GGUF model: loading it, tokenizing, and rendering its chat template.

Uses llama.cpp's low-level API only (no ``llama_cpp.Llama``): the engine needs direct
control over sequences and batches, which the high-level wrapper hides.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import llama_cpp
from jinja2.sandbox import ImmutableSandboxedEnvironment

from hasten.errors import ModelFileNotFound

# Used when a GGUF carries no chat template at all.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_META_BUFFER_BYTES = 1 << 16
_PIECE_BUFFER_BYTES = 256


def _quiet_llama_logs() -> None:
    # llama_cpp routes native logs through its own callback, gated by this logger's level;
    # installing another callback from Python is unsafe, so only the level is set.
    logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)


@dataclass(frozen=True, slots=True)
class ContextParams:
    n_ctx: int
    n_seq_max: int
    n_batch: int
    n_threads: int
    n_threads_single_token: int


class LocalModel:
    """A loaded GGUF: vocabulary, special tokens, chat template. Free with ``close``."""

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise ModelFileNotFound(f"GGUF model not found: {path}")
        _quiet_llama_logs()
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        self.path = path
        self.handle: Any = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not self.handle:
            raise ModelFileNotFound(f"llama.cpp could not load {path}")
        self.vocab: Any = llama_cpp.llama_model_get_vocab(self.handle)
        self.num_vocab = int(llama_cpp.llama_vocab_n_tokens(self.vocab))
        self.max_train_ctx = int(llama_cpp.llama_model_n_ctx_train(self.handle))
        self._add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))
        self._pieces: dict[int, bytes] = {}
        self._eog_ids = frozenset(
            token
            for token in range(self.num_vocab)
            if llama_cpp.llama_vocab_is_eog(self.vocab, token)
        )
        self._template = self._load_template()

    @property
    def eog_ids(self) -> frozenset[int]:
        return self._eog_ids

    def close(self) -> None:
        if self.handle:
            llama_cpp.llama_model_free(self.handle)
            self.handle = None

    def create_context(self, params: ContextParams) -> Any:
        """A llama context with one unified KV cache shared by ``n_seq_max`` sequences.

        Unified so that ``seq_cp`` shares a prefix's cells between sequences instead of
        copying a whole per-sequence stream.
        """
        ctx_params = llama_cpp.llama_context_default_params()
        ctx_params.n_ctx = params.n_ctx
        ctx_params.n_batch = params.n_batch
        ctx_params.n_ubatch = params.n_batch
        ctx_params.n_seq_max = params.n_seq_max
        # llama.cpp uses n_threads for one-token ubatches, n_threads_batch for the rest.
        ctx_params.n_threads = params.n_threads_single_token
        ctx_params.n_threads_batch = params.n_threads
        ctx_params.kv_unified = True
        ctx_params.no_perf = True
        ctx = llama_cpp.llama_init_from_model(self.handle, ctx_params)
        if not ctx:
            raise RuntimeError(f"llama.cpp could not create a context with {params}")
        return ctx

    def tokenize(self, text: str) -> list[int]:
        """Tokens of a rendered prompt; special tokens such as ``<|im_start|>`` are parsed."""
        data = text.encode()
        capacity = len(data) + 8
        buffer = (llama_cpp.llama_token * capacity)()
        count = llama_cpp.llama_tokenize(
            self.vocab, data, len(data), buffer, capacity, self._add_bos, True
        )
        if count < 0:
            raise ValueError(f"tokenization needs {-count} tokens, more than {capacity}")
        return list(buffer[:count])

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes a token stands for (possibly part of a UTF-8 character)."""
        piece = self._pieces.get(token_id)
        if piece is None:
            buffer = ctypes.create_string_buffer(_PIECE_BUFFER_BYTES)
            length = llama_cpp.llama_token_to_piece(
                self.vocab, token_id, buffer, _PIECE_BUFFER_BYTES, 0, False
            )
            piece = buffer.raw[: max(length, 0)]
            self._pieces[token_id] = piece
        return piece

    def render_chat(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """The prompt text for ``messages``, ending where the assistant's answer begins."""
        return self._template.render(
            messages=list(messages),
            add_generation_prompt=True,
            bos_token=self._special_text(llama_cpp.llama_vocab_bos(self.vocab)),
            eos_token=self._special_text(llama_cpp.llama_vocab_eos(self.vocab)),
        )

    def metadata(self, key: str) -> str | None:
        buffer = ctypes.create_string_buffer(_META_BUFFER_BYTES)
        length = llama_cpp.llama_model_meta_val_str(
            self.handle, key.encode(), buffer, _META_BUFFER_BYTES
        )
        if length < 0:
            return None
        return buffer.value.decode("utf-8", errors="replace")

    def _special_text(self, token_id: int) -> str:
        if token_id < 0:
            return ""
        buffer = ctypes.create_string_buffer(_PIECE_BUFFER_BYTES)
        length = llama_cpp.llama_token_to_piece(
            self.vocab, token_id, buffer, _PIECE_BUFFER_BYTES, 0, True
        )
        return buffer.raw[: max(length, 0)].decode("utf-8", errors="replace")

    def _load_template(self) -> jinja2.Template:
        source = self.metadata("tokenizer.chat_template") or CHATML_TEMPLATE
        environment = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        environment.globals["raise_exception"] = _raise_template_error
        return environment.from_string(source)


def _raise_template_error(message: str) -> None:
    raise ValueError(f"chat template: {message}")
