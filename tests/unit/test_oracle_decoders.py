"""The oracle's device decoders as an injected object (bench/oracle/decoders.py) and the application's
choice of them (recipekit/cli/oracle_decoders.py): the CLI hands the sm_80 Triton kernels to the oracle on
CUDA when Triton imports and the torch ops otherwise; the bit check finds a planted wrong decoder; the
stream and the forward use whatever they are handed and say which ran. The Triton kernels against the
codecs bit for bit: under Triton's interpreter on the CPU here (the kernels' integer logic), and on a
GPU where one is present (every e4m3 byte x every E8M0 code, every e2m1 byte, Engram rows, ragged blocks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch  # a test dependency (the oracle's decode)

from recipekit.bench.oracle import decode, stream
from recipekit.bench.oracle.decoders import TORCH, Decoders, from_spec, problems
from recipekit.bench.oracle.tiny import make_oracle_tiny
from recipekit.checkpoint import codecs, dsv41
from recipekit.checkpoint.safetensors_io import Checkpoint
from recipekit.cli import oracle_decoders
from recipekit.errors import RecipekitError

pytestmark = pytest.mark.timeout(300)
CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")


def _triton_importable() -> bool:
    try:
        import triton  # noqa: F401  # lazy: optional dependency, probed only
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return make_oracle_tiny(tmp_path_factory.mktemp("decoders") / "tiny")


def _vllm_e8m0_fp8(w, sc, block):
    """A planted wrong decoder: scale code 0 read as +0 (vLLM's in-kernel decode), not the codecs' 2^-127."""
    out = decode.fp8_dequant_t(w, sc, block)
    rows, cols = w.shape
    code = sc.repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)[:, :cols]
    return torch.where(code == 0, out * 0, out)


def _swapped_nibbles(p, sc):
    """A planted wrong decoder: the high nibble taken as the even index."""
    return decode.mxfp4_dequant_t(((p & 0x0F) << 4) | (p >> 4), sc)


def test_the_torch_ops_pass_the_bit_check_on_the_cpu():
    assert problems(TORCH, "cpu") == []


def test_a_planted_wrong_decoder_is_found_by_the_bit_check_and_refused():
    planted = Decoders("planted", _vllm_e8m0_fp8, _swapped_nibbles)
    found = problems(planted, "cpu")
    assert [p.split(":")[0] for p in found] == ["planted fp8 rows", "planted fp8 blocks", "planted mxfp4"], found
    assert "values differ (first: " in found[0]
    with pytest.raises(RecipekitError) as e:
        oracle_decoders.verified(planted, "cpu")
    assert e.value.code == "oracle-decoder-mismatch" and int(e.value.exit_code) == 1
    assert "planted fp8 rows" in e.value.message and "planted mxfp4" in e.value.message
    # one wrong bit is enough: a NaN code decoded as inf
    inf_nan = Decoders(
        "inf-for-nan",
        lambda w, sc, block: decode.fp8_dequant_t(w, torch.where(sc == 255, torch.full_like(sc, 254), sc), block),
        decode.mxfp4_dequant_t,
    )
    assert [p.split(":")[0] for p in problems(inf_nan, "cpu")] == ["inf-for-nan fp8 rows", "inf-for-nan fp8 blocks"]


def test_the_cli_picks_the_sm80_kernels_on_cuda_when_triton_imports():
    dec, why = oracle_decoders.pick("cuda")
    if not _triton_importable():
        pytest.skip("triton is not installed here")
    from recipekit.backends.cuda_sm80.kernels import dequant

    assert dec.name == "sm80-triton" and why == "CUDA device and Triton importable"
    assert dec.fp8_dequant is dequant.fp8_dequant and dec.mxfp4_dequant is dequant.mxfp4_dequant
    assert oracle_decoders.pick("cuda:1")[0].name == "sm80-triton"
    assert from_spec(dec.spec).name == "sm80-triton"  # what measure's forward child rebuilds
    assert oracle_decoders.pick("cuda", "torch") == (TORCH, "asked for (--decoders torch)")


def test_the_cli_falls_back_to_the_torch_ops_without_triton_and_on_the_cpu(monkeypatch):
    assert oracle_decoders.pick("cpu") == (TORCH, "device cpu: the Triton kernels run on CUDA only")
    with pytest.raises(RecipekitError) as e:
        oracle_decoders.pick("cpu", "sm80")
    assert e.value.code == "oracle-bad-option"
    with pytest.raises(RecipekitError) as e:
        oracle_decoders.pick("cuda", "fast")
    assert e.value.code == "oracle-bad-option" and "auto, sm80, torch" in e.value.message
    # Triton absent: the kernels' modules cannot import (`import triton` finds None)
    from recipekit.backends.cuda_sm80 import kernels

    for name in ("dequant", "decode"):
        monkeypatch.delitem(sys.modules, f"{kernels.__name__}.{name}", raising=False)
        monkeypatch.delattr(kernels, name, raising=False)
    monkeypatch.setitem(sys.modules, "triton", None)
    dec, why = oracle_decoders.pick("cuda")
    assert dec is TORCH and why.startswith("Triton does not import (")
    with pytest.raises(RecipekitError) as e:
        oracle_decoders.pick("cuda", "sm80")
    assert e.value.code == "oracle-decoders-unavailable" and int(e.value.exit_code) == 6


def test_the_spec_round_trips_and_refuses_what_is_not_decoders():
    assert from_spec(TORCH.spec or "") is TORCH
    with pytest.raises(TypeError, match="returned tuple, not Decoders"):
        from_spec("recipekit.bench.oracle.decode:_tables")


def _counting(base: Decoders) -> tuple[Decoders, dict[str, int]]:
    calls = {"fp8": 0, "mxfp4": 0}

    def fp8(w, sc, block):
        calls["fp8"] += 1
        return base.fp8_dequant(w, sc, block)

    def mx(p, sc):
        calls["mxfp4"] += 1
        return base.mxfp4_dequant(p, sc)

    return Decoders("counting", fp8, mx), calls


def test_the_stream_decodes_with_the_decoders_it_is_handed(tiny):
    dec, calls = _counting(TORCH)
    with Checkpoint(tiny) as ck:
        names = [n for n in ck.names() if not n.endswith(".scale")]
        got = dict(stream.stream_decoded(ck, names, "cpu", buffer_bytes=65_536, region_bytes=300_000, decoders=dec))
        plain = dict(stream.stream_decoded(ck, names, "cpu", buffer_bytes=65_536, region_bytes=300_000))
    assert calls["fp8"] > 10 and calls["mxfp4"] > 0
    assert got.keys() == plain.keys()
    assert all(got[n].numpy().tobytes() == plain[n].numpy().tobytes() for n in got)
    # a planted decoder's output is what the stream yields: the stream adds no decode of its own
    planted = Decoders(
        "planted", lambda w, sc, block: torch.zeros(w.shape), lambda p, sc: torch.zeros(p.shape[0], 2 * p.shape[1])
    )
    with Checkpoint(tiny) as ck:
        fp8 = next(n for n in names if ck.info(n).dtype == dsv41.FP8)
        out = dict(stream.stream_decoded(ck, [fp8], "cpu", decoders=planted))
    assert not out[fp8].any()


def test_the_forward_hands_its_decoders_to_the_stream_and_says_which_ran(tiny):
    from recipekit.bench.oracle.run import run_oracle

    ids = list(range(5, 37))
    dec, calls = _counting(TORCH)
    streamed = run_oracle(tiny, [ids], device="cpu", stream=True, decoders=dec)
    assert calls["fp8"] > 0 and streamed["decoders"] == "counting"
    assert run_oracle(tiny, [ids], device="cpu", stream=True)["decoders"] == "torch-ops"
    plain = run_oracle(tiny, [ids], device="cpu")
    assert plain["decoders"] == "numpy-codecs" and plain["results"] == streamed["results"]


def test_the_cli_hands_the_picked_decoders_to_the_oracle_and_reports_them(tiny, tmp_path, capsys, monkeypatch):
    from recipekit.bench.oracle import run as orun
    from recipekit.cli.main import main

    seen = []
    real = orun.run_oracle

    def spy(*a, **kw):
        seen.append(kw.get("decoders"))
        return real(*a, **kw)

    monkeypatch.setattr(orun, "run_oracle", spy)
    out = tmp_path / "ref.json"
    assert main(["oracle", "run", "-c", str(tiny), "--tokens", "8", "--out", str(out), "-f", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert seen == [TORCH] and doc["decoders"] == "numpy-codecs"
    assert doc["decoders_why"] == "device cpu: the Triton kernels run on CUDA only"
    assert json.loads(out.read_text())["decoders"] == "numpy-codecs"
    assert main(["oracle", "run", "-c", str(tiny), "--decoders", "sm80", "--out", str(tmp_path / "y.json")]) == 2
    assert "error[oracle-bad-option] --decoders sm80 needs a CUDA device" in capsys.readouterr().err
    # a planted wrong decoder picked for the device is refused before the forward runs
    planted = Decoders("planted", _vllm_e8m0_fp8, decode.mxfp4_dequant_t)
    monkeypatch.setattr(oracle_decoders, "pick", lambda device, choice="auto": (planted, "planted"))
    assert main(["oracle", "run", "-c", str(tiny), "--tokens", "8", "--out", str(tmp_path / "x.json")]) == 1
    assert "oracle-decoder-mismatch" in capsys.readouterr().err and len(seen) == 1


def test_measure_names_the_decoders_its_stream_ran(tiny, capsys):
    from recipekit.cli.main import main

    assert main(["oracle", "measure", "-c", str(tiny), "--no-forward", "--no-reader", "--stream", "-f", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["decoders"] == doc["stream"]["decoders"] == "torch-ops"
    with Checkpoint(tiny) as ck:
        tensor_bytes = sum(ck.info(n).nbytes for n in ck.names())
    assert doc["stream"]["cold"]["src_bytes"] >= tensor_bytes and doc["stream"]["warm"]["src_bytes"] >= tensor_bytes


@pytest.mark.skipif(not _triton_importable(), reason="triton is not installed here")
def test_the_triton_kernels_give_the_codecs_bits_under_the_interpreter():
    """TRITON_INTERPRET=1 runs the kernels' own code on the CPU (numpy arithmetic): every byte and code."""
    code = (
        "from recipekit.cli.oracle_decoders import sm80_decoders;"
        "from recipekit.bench.oracle.decoders import problems;"
        "print(repr(problems(sm80_decoders(), 'cpu')))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True,
        timeout=240, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "[]"


# ------------------------------------------------------------------ on a GPU


def _same_bits(a: np.ndarray, b: np.ndarray, what: str) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype == np.float32, what
    na, nb = np.isnan(a), np.isnan(b)
    assert (na == nb).all(), f"{what}: NaN positions differ"
    assert (a.view(np.uint32)[~na] == b.view(np.uint32)[~nb]).all(), f"{what}: bits differ"


@needs_cuda
def test_the_sm80_decoders_pass_the_bit_check_on_the_gpu():
    dec = oracle_decoders.sm80_decoders()
    assert problems(dec, "cuda") == []  # every e4m3 byte x every code, ragged 32x32, every e2m1 byte x every code
    assert oracle_decoders.for_device("cuda")[0].name == "sm80-triton"


@needs_cuda
def test_the_sm80_decoders_match_the_codecs_on_the_gpu_on_engram_rows_and_large_tensors():
    from recipekit.backends.cuda_sm80.kernels import dequant

    rng = np.random.default_rng(11)
    with np.errstate(over="ignore", invalid="ignore"):
        # Engram rows: a table [rows, 1024] with one code per row per 32 columns, all codes, a ragged row count
        t = rng.integers(0, 256, (1237, 1024), dtype=np.uint8)
        s = rng.integers(0, 256, (1237, 32), dtype=np.uint8)
        got = dequant.fp8_dequant(torch.from_numpy(t).cuda(), torch.from_numpy(s).cuda(), codecs.ENGRAM_BLOCK)
        _same_bits(got.cpu().numpy(), codecs.fp8_dequant_f32(t, s, codecs.ENGRAM_BLOCK), "engram rows")
        # a linear's shape with scale codes in the exact range (3..246), and a ragged one
        for shape in ((2048, 7168), (1000, 4100)):
            w = rng.integers(0, 256, shape, dtype=np.uint8)
            sc = rng.integers(3, 247, codecs.expected_scale_shape(shape, codecs.FP8_BLOCK), dtype=np.uint8)
            got = dequant.fp8_dequant(torch.from_numpy(w).cuda(), torch.from_numpy(sc).cuda())
            _same_bits(got.cpu().numpy(), codecs.fp8_dequant_f32(w, sc), f"fp8 {shape}")
        # stacked experts (the stream's batched call) and a k that is not a multiple of the tile
        for rows, half in ((16 * 512, 2048), (300, 1000)):
            p = rng.integers(0, 256, (rows, half), dtype=np.uint8)
            sp = rng.integers(0, 256, (rows, -(-2 * half // 32)), dtype=np.uint8)
            got = dequant.mxfp4_dequant(torch.from_numpy(p).cuda(), torch.from_numpy(sp).cuda())
            _same_bits(got.cpu().numpy(), codecs.mxfp4_dequant_f32(p, sp), f"mxfp4 {rows}x{half}")
    # an empty tensor launches nothing
    assert dequant.fp8_dequant(
        torch.empty((0, 32), dtype=torch.uint8, device="cuda"), torch.empty((0, 1), dtype=torch.uint8, device="cuda")
    ).shape == (0, 32)


@needs_cuda
def test_streamed_tensors_are_the_codecs_bits_on_cuda_with_the_sm80_decoders(tiny):
    from tests.unit.test_oracle_stream import _check_stream

    assert _check_stream(tiny, "cuda", oracle_decoders.sm80_decoders()) > 500


def test_the_forward_child_checks_the_decoders_it_rebuilds_from_their_spec(tiny, tmp_path, monkeypatch):
    """measure's forward runs in a fresh process that rebuilds its decoders from a spec: those objects are
    bit-checked there too, not trusted from the parent's check of other objects."""
    import types

    from recipekit.bench.oracle.measure import checked_from_spec, forward_child

    assert checked_from_spec(TORCH.spec or "", "cpu") is TORCH
    planted_mod = types.ModuleType("planted_decoders_mod")
    planted_mod.make = lambda: Decoders("planted", decode.fp8_dequant_t, _swapped_nibbles)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "planted_decoders_mod", planted_mod)
    with pytest.raises(ValueError, match=r"the planted decoders differ from the codecs on cpu: planted mxfp4: "):
        checked_from_spec("planted_decoders_mod:make", "cpu")
    # the child process itself refuses them, before its forward runs
    (tmp_path / "planted_child_mod.py").write_text(
        "from recipekit.bench.oracle import decode\n"
        "from recipekit.bench.oracle.decoders import Decoders\n"
        "def make():\n"
        "    return Decoders('planted', decode.fp8_dequant_t,\n"
        "                    lambda p, sc: decode.mxfp4_dequant_t(((p & 0x0F) << 4) | (p >> 4), sc))\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    with pytest.raises(RuntimeError, match=r"ValueError: the planted decoders differ from the codecs on cpu"):
        forward_child(str(tiny), 8, "cpu", None, "planted_child_mod:make")
