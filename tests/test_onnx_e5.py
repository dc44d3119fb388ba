"""The shipped ONNX graph and vocabulary are exactly what scripts/build_e5_onnx.py makes."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engramdb.embedders import _onnx_e5
from engramdb.embedders._e5file import E5File
from engramdb.embedders.local import _bundled_model_path

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("onnx", reason="the build script needs the dev extra's onnx")


def test_the_build_script_reproduces_the_shipped_files(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts/build_e5_onnx.py"), "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    built = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.iterdir()}
    assert built == {
        "e5-small-int8.onnx": _onnx_e5.ONNX_SHA256,
        "e5-small-vocab.model": _onnx_e5.VOCAB_SHA256,
    }
    shipped = _onnx_e5.bundled_onnx_path().parent
    for name, digest in built.items():
        assert hashlib.sha256((shipped / name).read_bytes()).hexdigest() == digest


def test_the_model_file_parses_to_the_shapes_of_e5_small() -> None:
    model = E5File(_bundled_model_path())
    assert (model.hidden, model.layers, model.heads, model.ffn) == (384, 12, 12, 1536)
    assert model.max_positions == 512
    assert (model.bos, model.pad, model.eos, model.unk) == (0, 1, 2, 3)
    vocab = model.vocabulary()
    assert len(vocab) == model.n_pieces == 250002
    assert vocab[:4] == [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    assert model.word_rows(np.array([5, 6])).shape == (2, 384)


def test_a_file_that_is_not_an_e5_model_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(ValueError, match="not an E5S1 model file"):
        E5File(bad)
    truncated = tmp_path / "truncated.bin"
    truncated.write_bytes(_bundled_model_path().read_bytes()[:5000])
    with pytest.raises(ValueError, match="truncated or malformed"):
        E5File(truncated)
