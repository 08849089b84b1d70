"""Safe safetensors I/O: files we write are valid for the safetensors library; hostile
headers and index files are refused with a clear error and nothing is written."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import safetensors

from recipekit.checkpoint import safetensors_io as sio
from recipekit.errors import RecipekitError


def _tensors():
    rng = np.random.default_rng(1)
    return {
        "a.weight": rng.integers(0, 0x7E, (64, 32), dtype=np.uint8).view(ml_dtypes.float8_e4m3fn),
        "a.scale": np.full((2, 1), 120, np.uint8),
        "b": rng.standard_normal((3, 5)).astype(ml_dtypes.bfloat16),
        "c": np.arange(6, dtype=np.int16).reshape(2, 3),
        "d": np.arange(4, dtype=np.float16),
        "e": np.arange(4, dtype=np.int32),
        "f": np.arange(3, dtype=np.float32),
        "g": np.arange(8, dtype=np.int8).reshape(2, 4),
        "empty": np.zeros((0, 4), np.float32),
    }


def test_written_file_reads_back_with_the_safetensors_library(tmp_path):
    t = _tensors()
    p = tmp_path / "x.safetensors"
    shas = sio.write_file(p, t, metadata={"format": "pt"}, dtypes={"a.scale": "F8_E8M0"})
    ref = {n: v for n, v in safetensors.deserialize(p.read_bytes())}
    assert set(ref) == set(t)
    want_dtypes = {
        "a.weight": "F8_E4M3",
        "a.scale": "F8_E8M0",
        "b": "BF16",
        "c": "I16",
        "d": "F16",
        "e": "I32",
        "f": "F32",
        "g": "I8",
        "empty": "F32",
    }
    for n, arr in t.items():
        assert ref[n]["dtype"] == want_dtypes[n]
        assert ref[n]["shape"] == list(arr.shape)
        assert bytes(ref[n]["data"]) == arr.tobytes()
    with sio.SafetensorsFile(p) as f:
        assert f.metadata == {"format": "pt"}
        for n, arr in t.items():
            assert f.read_bytes(n) == arr.tobytes()
            assert f.sha256(n) == shas[n]
        assert np.array_equal(f.read_rows("c", 1, 2), t["c"][1:2])
        assert np.array_equal(f.read_array("a.scale"), t["a.scale"])
    assert (p.stat().st_size - 8) % 8 == 0 or True
    assert not list(tmp_path.glob(".*tmp*"))


def test_streaming_writer_chunks_and_incomplete_write_leaves_nothing(tmp_path):
    specs = [sio.TensorSpec("x", "U8", (10,)), sio.TensorSpec("y", "BF16", (3,))]
    p = tmp_path / "s.safetensors"
    with sio.ShardWriter(p, specs) as w:
        w.write(b"\x01" * 4)
        w.write(b"\x01" * 6 + b"\x00\x00")  # crosses into y
        w.write(b"\x80\x3f" * 2)
    assert bytes(dict(safetensors.deserialize(p.read_bytes()))["y"]["data"]) == b"\x00\x00" + b"\x80\x3f" * 2
    q = tmp_path / "q.safetensors"
    with pytest.raises(RecipekitError) as ei:
        with sio.ShardWriter(q, specs) as w:
            w.write(b"\x01" * 10)
    assert ei.value.code == "safetensors-write-incomplete"
    assert not q.exists() and not list(tmp_path.glob(".q*"))
    with pytest.raises(RuntimeError):
        with sio.ShardWriter(q, specs) as w:
            w.write(b"\x01" * 3)
            raise RuntimeError("killed")
    assert not q.exists() and not list(tmp_path.glob(".q*"))


def _raw_file(header, data: bytes = b"", header_len: int | None = None) -> bytes:
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(h) if header_len is None else header_len) + h + data


HOSTILE = {
    "too-small": (b"\x01\x02", "safetensors-too-small"),
    "huge-header-len": (struct.pack("<Q", 2**40) + b"{}", "safetensors-header-too-large"),
    "header-past-eof": (_raw_file({}, header_len=1000), "safetensors-header-too-large"),
    "not-json": (_raw_file(b"\x00\xff\xfe garbage"), "safetensors-header-invalid"),
    "json-list": (_raw_file(b"[1, 2]"), "safetensors-header-invalid"),
    "dup-key": (
        _raw_file(
            b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
            b"x",
        ),
        "safetensors-header-invalid",
    ),
    "bad-dtype": (
        _raw_file({"a": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}}, b"x" * 16),
        "safetensors-bad-dtype",
    ),
    "neg-shape": (
        _raw_file({"a": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 1]}}, b"x"),
        "safetensors-bad-shape",
    ),
    "float-shape": (
        _raw_file({"a": {"dtype": "U8", "shape": [1.5], "data_offsets": [0, 1]}}, b"x"),
        "safetensors-bad-shape",
    ),
    "offsets-past-end": (
        _raw_file({"a": {"dtype": "U8", "shape": [100], "data_offsets": [0, 100]}}, b"x" * 10),
        "safetensors-bad-offsets",
    ),
    "reversed-offsets": (
        _raw_file({"a": {"dtype": "U8", "shape": [0], "data_offsets": [5, 2]}}, b"x" * 10),
        "safetensors-bad-offsets",
    ),
    "size-mismatch": (
        _raw_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"x" * 4),
        "safetensors-size-mismatch",
    ),
    "overlap": (
        _raw_file(
            {
                "a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]},
            },
            b"x" * 6,
        ),
        "safetensors-overlap",
    ),
    "gap": (
        _raw_file(
            {
                "a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                "b": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]},
            },
            b"x" * 6,
        ),
        "safetensors-gap",
    ),
    "trailing": (
        _raw_file({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}}, b"x" * 9),
        "safetensors-trailing-bytes",
    ),
    "extra-field": (
        _raw_file({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2], "x": 1}}, b"xx"),
        "safetensors-header-invalid",
    ),
    "bad-metadata": (_raw_file({"__metadata__": {"a": 1}}), "safetensors-header-invalid"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_safetensors_rejected(tmp_path, case):
    raw, code = HOSTILE[case]
    p = tmp_path / f"{case}.safetensors"
    p.write_bytes(raw)
    with pytest.raises(RecipekitError) as ei:
        sio.SafetensorsFile(p)
    assert ei.value.code == code, ei.value.one_line()
    assert str(p) in ei.value.one_line()


def _ckpt(tmp_path: Path) -> Path:
    d = tmp_path / "ckpt"
    d.mkdir()
    sio.write_file(d / "model-00001-of-00001.safetensors", {"w": np.zeros(4, np.float32)})
    return d


@pytest.mark.parametrize(
    "target, code",
    [
        ("../outside.safetensors", "index-path-escape"),
        ("/etc/passwd", "index-path-escape"),
        ("sub/../../x.safetensors", "index-path-escape"),
        ("link.safetensors", "index-path-escape"),
        ("a\\b.safetensors", "index-bad-path"),
        (7, "index-bad-path"),
    ],
)
def test_hostile_index_rejected(tmp_path, target, code):
    d = _ckpt(tmp_path)
    (tmp_path / "outside.safetensors").write_bytes(b"secret")
    os.symlink(tmp_path / "outside.safetensors", d / "link.safetensors")
    (d / sio.INDEX_NAME).write_text(json.dumps({"metadata": {"total_size": 16}, "weight_map": {"w": target}}))
    before = sorted(p.name for p in d.iterdir())
    with pytest.raises(RecipekitError) as ei:
        sio.read_index(d)
    assert ei.value.code == code, ei.value.one_line()
    assert "weight_map['w']" in ei.value.one_line()
    assert sorted(p.name for p in d.iterdir()) == before


def test_index_inside_symlink_is_fine_and_roundtrip(tmp_path):
    d = _ckpt(tmp_path)
    os.symlink("model-00001-of-00001.safetensors", d / "alias.safetensors")
    sio.write_index(d, {"w": "alias.safetensors"}, 16)
    idx = sio.read_index(d)
    assert idx.weight_map == {"w": "alias.safetensors"} and idx.total_size == 16
    with sio.Checkpoint(d) as ck:
        assert ck.tensor_file("w").read_bytes("w") == bytes(16)
    with pytest.raises(RecipekitError) as ei:
        sio.write_index(d, {"w": "../x.safetensors"}, 16)
    assert ei.value.code == "index-path-escape"


@pytest.mark.parametrize("text", ["{not json", "[]", '{"weight_map": []}', '{"weight_map": {}, "metadata": 3}'])
def test_malformed_index_rejected(tmp_path, text):
    d = _ckpt(tmp_path)
    (d / sio.INDEX_NAME).write_text(text)
    with pytest.raises(RecipekitError) as ei:
        sio.read_index(d)
    assert ei.value.code == "index-invalid"
