"""The oracle's streaming reader (bench/oracle/stream.py): region planning, the pipeline's order,
host-buffer reuse and memory bound, the reader's error on a truncated shard, early stop, and every
streamed tensor bit-identical to the numpy codecs, on a CPU "device" here and on CUDA where present
(every e4m3 byte, e2m1 byte and E8M0 code decoded on the GPU against the codecs)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch  # a test dependency (the oracle's decode)

from recipekit.bench.oracle import decode, stream
from recipekit.bench.oracle.tiny import make_oracle_tiny
from recipekit.checkpoint import codecs, dsv41
from recipekit.checkpoint.safetensors_io import Checkpoint
from recipekit.errors import RecipekitError

pytestmark = pytest.mark.timeout(300)
CUDA = torch.cuda.is_available()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return make_oracle_tiny(tmp_path_factory.mktemp("stream") / "tiny")


def _same_bits(a: np.ndarray, b: np.ndarray, what: str) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype == np.float32, what
    na, nb = np.isnan(a), np.isnan(b)
    assert (na == nb).all(), f"{what}: NaN positions differ"
    assert (a.view(np.uint32)[~na] == b.view(np.uint32)[~nb]).all(), f"{what}: bits differ"


def _expected(ck: Checkpoint, name: str) -> np.ndarray:
    """The numpy codecs' fp32 of one weight (the converters' decoders), independent of torch."""
    f = ck.tensor_file(name)
    info = f.info(name)
    scale = name[: -len(".weight")] + ".scale"
    if info.dtype == dsv41.FP8 and scale in ck.index.weight_map:
        block = codecs.ENGRAM_BLOCK if ".engram.embed" in name else codecs.FP8_BLOCK
        return codecs.fp8_dequant_f32(f.read_array(name).view(np.uint8), ck.tensor_file(scale).read_array(scale), block)
    if info.dtype == dsv41.I8 and scale in ck.index.weight_map:
        return codecs.mxfp4_dequant_f32(f.read_array(name).view(np.uint8), ck.tensor_file(scale).read_array(scale))
    return f.read_array(name).astype(np.float32)


def _weights(ck: Checkpoint) -> list[str]:
    scaled = {n[: -len(".scale")] + ".weight" for n in ck.names() if n.endswith(".scale")}
    return [n for n in ck.names() if not (n.endswith(".scale") and n[: -len(".scale")] + ".weight" in scaled)]


def test_plan_regions_cover_each_tensor_once_with_few_large_reads(tiny):
    with Checkpoint(tiny) as ck:
        names = list(ck.names())
        regions = stream.plan_regions(ck, names, region_bytes=1 << 20)
        seen = [sp.name for r in regions for sp in r.spans]
        assert sorted(seen) == sorted(names)
        for r in regions:
            f = next(ck.file(rel) for rel in ck.index.shards() if str(ck.file(rel).path) == r.path)
            for sp in r.spans:
                t = f.info(sp.name)
                assert r.offset + sp.start == f.data_start + t.begin and sp.nbytes == t.nbytes
                assert 0 <= sp.start and sp.start + sp.nbytes <= r.nbytes
            assert r.nbytes <= 1 << 20 or len(r.spans) == 1
        total = sum(ck.info(n).nbytes for n in names)
        assert len(regions) < len(names) / 10  # 852 tensors, not one read each
        assert sum(r.nbytes for r in regions) == total  # the generator leaves no holes


def _run_pipeline(tiny: Path, buffer_bytes: int, n_buffers: int) -> tuple[stream.Pipeline, list, bytes]:
    with Checkpoint(tiny) as ck:
        regions = stream.plan_regions(ck, list(ck.names()), region_bytes=300_000)
    pipe = stream.Pipeline(regions, stream.Transfer("cpu"), buffer_bytes=buffer_bytes, n_buffers=n_buffers, depth=2)
    got = [(reg, bytes(dev.numpy())) for reg, dev in pipe]
    return pipe, got, b""


def test_pipeline_order_buffer_reuse_and_memory_bound(tiny):
    pipe, got, _ = _run_pipeline(tiny, buffer_bytes=65_536, n_buffers=3)
    assert [r for r, _ in got] == pipe.regions  # regions come out in the planned order
    for reg, data in got:  # each region's bytes are the file's bytes
        with open(reg.path, "rb") as f:
            f.seek(reg.offset)
            assert data == f.read(reg.nbytes)
    # chunks in file order, host buffers used round-robin, never more than n_buffers of buffer_bytes
    want = [(ri, off) for ri, r in enumerate(pipe.regions) for off in range(0, r.nbytes, 65_536)]
    assert [(ri, off) for ri, off, _ in pipe.order] == want
    assert [slot for _, _, slot in pipe.order] == [i % 3 for i in range(len(want))]
    assert pipe.stats.buffers_used == 3 and pipe.stats.host_bytes == 3 * 65_536
    assert pipe.stats.bytes_read == sum(r.nbytes for r in pipe.regions)
    assert pipe.stats.regions == len(pipe.regions)


def test_one_buffer_still_streams_everything(tiny):
    pipe, got, _ = _run_pipeline(tiny, buffer_bytes=1_000_000, n_buffers=1)
    assert {slot for _, _, slot in pipe.order} == {0} and pipe.stats.host_bytes == 1_000_000
    assert len(got) == len(pipe.regions)


def test_truncated_shard_gives_the_readers_error(tiny, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(tiny, bad)
    with Checkpoint(bad) as ck:
        names = list(ck.names())
        last = max(names, key=lambda n: (ck.shard_of(n), ck.info(n).begin))
        path = ck.tensor_file(last).path
        os.truncate(path, path.stat().st_size - 10)  # after the header was read: a short read mid-stream
        with pytest.raises(RecipekitError) as e:
            for _ in stream.stream_decoded(ck, names, "cpu", buffer_bytes=65_536, region_bytes=300_000):
                pass
    assert e.value.code == "safetensors-truncated" and "short read at offset" in e.value.message
    assert e.value.location == str(path)


def test_early_stop_joins_the_reader_thread(tiny):
    import threading

    with Checkpoint(tiny) as ck:
        it = stream.stream_decoded(ck, list(ck.names()), "cpu", buffer_bytes=4096, n_buffers=2, region_bytes=8192)
        next(it)
        it.close()
    assert not [t for t in threading.enumerate() if t.name == "oracle-stream-reader"]


def _check_stream(tiny: Path, device: str, decoders: stream.Decoders = stream.TORCH) -> int:
    n = 0
    storages: dict[int, int] = {}
    with Checkpoint(tiny) as ck:
        want = _weights(ck)
        seen = []
        for name, x in stream.stream_decoded(
            ck, want, device, buffer_bytes=65_536, region_bytes=300_000, decoders=decoders
        ):
            if ck.info(name).dtype == dsv41.I8:  # MXFP4 experts: fresh fp32, shared only when stacked
                ptr = x.untyped_storage().data_ptr()
                storages[ptr] = storages.get(ptr, 0) + 1
            assert x.device.type == torch.device(device).type
            got = x.cpu().numpy()
            exp = _expected(ck, name)
            if ck.info(name).dtype in (dsv41.FP8, dsv41.I8, "BF16", "F32"):
                _same_bits(got, exp, name)
            else:  # raw codes (an unpaired E8M0 tensor): its bytes
                assert got.tobytes() == np.asarray(ck.tensor_file(name).read_array(name)).tobytes(), name
            seen.append(name)
            n += 1
        assert sorted(seen) == sorted(want)
    assert max(storages.values()) >= 8  # a region's experts were decoded as one stacked call
    return n


def test_streamed_tensors_are_the_codecs_bits_on_cpu(tiny):
    assert _check_stream(tiny, "cpu") > 500


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_streamed_tensors_are_the_codecs_bits_on_cuda(tiny):
    assert _check_stream(tiny, "cuda") > 500


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_every_byte_and_scale_code_decodes_identically_on_the_gpu():
    b = np.arange(256, dtype=np.uint8)
    # FP8: every e4m3 byte against every E8M0 code (per-row blocks of 32 columns: 256 rows x 256 bytes)
    w = np.tile(b, (256, 1))
    sc = np.repeat(b[:, None], 256 // 32, axis=1)
    gpu = decode.fp8_dequant_t(torch.from_numpy(w).cuda(), torch.from_numpy(sc).cuda(), codecs.ENGRAM_BLOCK)
    _same_bits(gpu.cpu().numpy(), codecs.fp8_dequant_f32(w, sc, codecs.ENGRAM_BLOCK), "fp8 rows")
    # the 32x32 blocks, ragged edges included
    rng = np.random.default_rng(3)
    w2 = rng.integers(0, 256, (70, 45), dtype=np.uint8)
    w2.reshape(-1)[:256] = b
    sc2 = rng.integers(0, 256, codecs.expected_scale_shape((70, 45), codecs.FP8_BLOCK), dtype=np.uint8)
    sc2.reshape(-1)[:4] = [0, 1, 254, 255]
    gpu2 = decode.fp8_dequant_t(torch.from_numpy(w2).cuda(), torch.from_numpy(sc2).cuda(), codecs.FP8_BLOCK)
    _same_bits(gpu2.cpu().numpy(), codecs.fp8_dequant_f32(w2, sc2, codecs.FP8_BLOCK), "fp8 blocks")
    # MXFP4: every packed byte (both nibbles) against every E8M0 code
    p = np.tile(b, (256, 1))  # 256 rows x k=512
    sp = np.repeat(b[:, None], 512 // 32, axis=1)
    gpu3 = decode.mxfp4_dequant_t(torch.from_numpy(p).cuda(), torch.from_numpy(sp).cuda())
    _same_bits(gpu3.cpu().numpy(), codecs.mxfp4_dequant_f32(p, sp), "mxfp4")
    # BF16: every bit pattern, at an odd byte offset too (the unaligned copy path)
    bf = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    raw = np.concatenate([np.zeros(1, np.uint8), bf.view(np.uint8)])
    dev = torch.from_numpy(raw).cuda()
    want = bf.view(ml_dtypes.bfloat16).astype(np.float32)
    _same_bits(decode.widen_t(dev[1:], "BF16").cpu().numpy(), want, "bf16 unaligned")
    _same_bits(decode.widen_t(torch.from_numpy(bf.view(np.uint8).copy()).cuda(), "BF16").cpu().numpy(), want, "bf16")


def test_the_forward_on_streamed_weights_is_bit_identical(tiny, monkeypatch):
    """The oracle's CUDA path (a layer's dense weights streamed and decoded on the device), run on the
    CPU device: the same log-probs, bit for bit, as the per-tensor reader, which it no longer calls."""
    from recipekit.bench.oracle import reader
    from recipekit.bench.oracle.run import run_oracle

    ids = list(range(5, 69))
    plain = run_oracle(tiny, [ids], device="cpu", stream=False)
    per_tensor: list[str] = []
    dense = reader.OriginalReader.dense

    def counted(self, name):
        per_tensor.append(name)
        return dense(self, name)

    monkeypatch.setattr(reader.OriginalReader, "dense", counted)
    streamed = run_oracle(tiny, [ids], device="cpu", stream=True)
    assert streamed["results"] == plain["results"] and len(plain["results"][0]["logprobs"]) == 63
    assert per_tensor == ["norm.weight"]  # only the final norm, outside the layers
    kinds = streamed["measured"]["bytes_read_by_kind"], plain["measured"]["bytes_read_by_kind"]
    assert kinds[0]["dense"] >= kinds[1]["dense"] > 0
