"""The FP8 bench and sweep 14 run on DSV4.1-Flash's own dense FP8 weights: the shapes are checked against the
checkpoint contract built from the real config, every sweep-14 candidate takes its shape's K, and a sweep over
some shapes keeps the committed table's entries for the others. No GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipekit.bench.kernels import roofline
from recipekit.checkpoint import dsv41
from tests.unit.real_dsv41_config import REAL

pytest.importorskip("torch")
pytest.importorskip("triton")

from recipekit.backends.cuda_sm80.kernels import tuning  # noqa: E402
from recipekit.backends.cuda_sm80.kernels.fp8_gemm import gemv_fits  # noqa: E402
from recipekit.cli import kernels_fp8_sweep as sweep  # noqa: E402


def test_the_bench_shapes_are_dsv41_flash_dense_fp8_weights_of_one_layer():
    specs = dsv41.original_tensors(dsv41.Geometry.from_config(REAL))
    fp8 = {name: s.shape for name, s in specs.items() if s.dtype == "F8_E4M3" and s.kind == "dense"}
    layer = {name.split("layers.2.", 1)[1]: shape for name, shape in fp8.items() if name.startswith("layers.2.")}
    expected = dict(layer)
    w1, w3 = expected.pop("ffn.shared_experts.w1.weight"), expected.pop("ffn.shared_experts.w3.weight")
    assert w1 == w3  # merged into one gate-up weight, as vLLM's merged column-parallel layer
    expected["ffn.shared_experts.w1+w3.weight"] = (w1[0] + w3[0], w1[1])
    assert {f"{name}.weight": shape for name, shape in roofline.DSV41_FP8_SHAPES.items()} == expected
    # none of the research's four shapes is one of them
    assert not set(roofline.RESEARCH_FP8_SHAPES) & set(roofline.FP8_SHAPES)


def test_sweep_14_runs_dsv41_shapes_and_earlier_sweeps_the_research_shapes():
    assert sweep.sweep_shapes(True, 14) == roofline.FP8_SHAPES
    assert sweep.sweep_shapes(True, 13) == roofline.RESEARCH_FP8_SHAPES
    assert sweep.sweep_shapes(False, 13) == roofline.FP8_SHAPES  # a full sweep: the model's shapes


@pytest.mark.parametrize("shape", roofline.FP8_SHAPES)
def test_every_sweep_14_candidate_takes_its_k(shape):
    n, k = shape
    for m in sweep.MS:
        cands = sweep.dsv41_candidates(k, m)
        assert cands and len(cands) == len(set(cands))
        for path, cfg in cands:
            if path == "gemv":
                assert gemv_fits(k, cfg), (k, m, cfg)
            elif path == "mma":
                assert k % (cfg[1] * cfg[4]) == 0, (k, m, cfg)
            else:  # the table's hand-placed MMA entries (sweep 19)
                assert path == "gluon" and sweep._fits(k, path, cfg), (k, m, cfg)
            if path == "gemv" and cfg[3] > 1 and cfg in sweep.DSV41_GEMV_M1:
                assert cfg[8] == 1  # split with the serial sum: no sum launch
    # the small-N weights get K split 5 and 10 ways at M = 1 (512 rows are 32 programs of 16)
    splits = {cfg[3] for path, cfg in sweep.dsv41_candidates(5120, 1) if path == "gemv"}
    assert {1, 2, 4, 5, 8, 10} <= splits


def test_a_sweep_over_some_shapes_keeps_the_committed_entries_of_the_others(tmp_path: Path):
    doc = {"provenance": {"gpu": "NVIDIA H200"}}
    rows = [{"n": 512, "k": 5120, "m": 1}]
    entries = [{"card": "NVIDIA H200", "n": 512, "k": 5120, "m": 1, "path": "gemv", "config": [16, 512, 4, 5]}]
    committed = tuning.table()["entries"]
    sweep._write(tmp_path, None, doc, rows, entries)
    table = json.loads((tmp_path / "fp8_tuning.json").read_text())
    assert table["entries"][0] == entries[0]
    assert table["entries"][1:] == [e for e in committed if (e["n"], e["k"]) != (512, 5120)]
    # a shape the run measured again loses its old entries: re-running the committed shapes keeps none of them
    again = [{"n": e["n"], "k": e["k"], "m": e["m"]} for e in committed]
    sweep._write(tmp_path, None, doc, again, [])
    assert json.loads((tmp_path / "fp8_tuning.json").read_text())["entries"] == []


def test_sweep_15_runs_the_two_shapes_that_lost_to_torch_with_candidates_that_take_their_k():
    assert sweep.sweep_shapes(True, 15) == ((5120, 2304), (4096, 1280))
    assert set(sweep.SWEEP15_SHAPES) <= set(roofline.FP8_SHAPES)
    for _, k in sweep.SWEEP15_SHAPES:
        assert sweep.sweep15_candidates(k, 1) == []  # M = 1 already beat torch there
        for m in (2, 4, 8, 16):
            cands = sweep.sweep15_candidates(k, m)
            assert cands and all(sweep._fits(k, *c) for c in cands)
            assert any(p == "gemv" for p, _ in cands) == (m <= 8)  # the register tile takes M <= 8


def test_mma_fits_is_the_swapped_kernels_own_rule():
    from recipekit.backends.cuda_sm80.kernels.fp8_gemm import mma_fits

    assert mma_fits(2304, (64, 128, 4, 3, 3, 4, 1, 0, 1, 1))  # 2304 = 6 x 384
    assert not mma_fits(2304, (64, 128, 4, 3, 4, 4, 1, 0, 1, 1))  # 2304 / 512 is no whole number
    assert not mma_fits(5120, (16, 128, 2, 3, 1, 0, 1))  # DECODER 0 wants BLOCK_N a multiple of 32
    assert not mma_fits(5120, (64, 128, 2, 3, 1, 1, 1))  # DECODER 1 wants BLOCK_N at most 32
    assert not mma_fits(5120, (64, 128, 2, 3, 1, 5, 1))  # DECODER 0..4
    assert mma_fits(2304, (32, 256, 4, 3, 4))  # the plain kernel (no SWAP field): any K a multiple of 32


def test_sweep_16_stages_hold_every_step_of_a_program_within_the_shared_memory_bound():
    assert sweep.sweep_shapes(True, 16) == roofline.FP8_SHAPES
    assert sweep.deep_stages(20) == [5, 12]  # capped
    assert sweep.deep_stages(9) == [5, 10]  # all 9 steps in flight
    assert sweep.deep_stages(4) == [5]
    assert sweep.deep_stages(3) == []  # sweeps 12-15 already staged 3-4 deep
    for _, k in roofline.FP8_SHAPES:
        for m in sweep.MS:
            cands = sweep.sweep16_candidates(k, m)
            assert len(cands) == len(set(cands))
            assert any(p == "gemv" for p, _ in cands) == (m <= 8)
            assert any(p == "mma" for p, _ in cands) == (m >= 2)
            for path, cfg in cands:
                assert sweep._fits(k, path, cfg)
                if path == "gemv":
                    bn, bk, _, sp = cfg[:4]
                    steps, stages = k // (bk * sp), cfg[9]
                    assert bn * bk * stages <= sweep.DEEP_SMEM and cfg[8] == int(sp > 1)
                else:
                    bn, bk, _, stages, sp = cfg[:5]
                    steps = k // (bk * sp)
                    assert (bn + 32) * bk * stages <= sweep.DEEP_SMEM and cfg[5] == 4 and cfg[9] == int(sp > 1)
                assert stages in sweep.deep_stages(steps)


def test_sweep_17_is_the_swapped_mma_kernel_on_mma_sync_from_m_2():
    assert sweep.sweep_shapes(True, 17) == roofline.FP8_SHAPES
    for _, k in roofline.FP8_SHAPES:
        assert sweep.sweep17_candidates(k, 1) == []
        cands = sweep.sweep17_candidates(k, 4)
        assert cands and all(p == "mma" and sweep._fits(k, p, c) for p, c in cands)
        assert {c[8] for _, c in cands} == {1}  # MMA_V2: mma.sync on the H200 too, as on sm_80
        assert {c[2] for _, c in cands} == {1, 2, 4, 8}


def test_sweep_18_is_decoder_5_on_one_row_block_of_codes_per_program():
    from recipekit.backends.cuda_sm80.kernels.fp8_gemm import swap_fits

    assert sweep.sweep_shapes(True, 18) == roofline.FP8_SHAPES
    assert swap_fits(5120, 32, 128, 4, 5) and swap_fits(5120, 16, 256, 1, 5)
    assert not swap_fits(5120, 64, 128, 1, 5)  # two row blocks of codes in one program
    assert not swap_fits(5120, 32, 128, 1, 6)  # DECODER 0..5
    for _, k in roofline.FP8_SHAPES:
        assert sweep.sweep18_candidates(k, 1) == []
        cands = sweep.sweep18_candidates(k, 8)
        assert cands and all(p == "mma" and c[5] == 5 and c[0] in (16, 32) and sweep._fits(k, p, c) for p, c in cands)


def test_sweep_19_and_the_table_s_gluon_entries_take_their_k_and_m():
    from recipekit.backends.cuda_sm80.kernels import fp8_gemv_mma

    assert fp8_gemv_mma.fits(1280, 4, 4) and fp8_gemv_mma.fits(2304, 8, 1)  # 2304 = 72 blocks: 9 per warp
    assert not fp8_gemv_mma.fits(2304, 4, 2)  # S 1, 4 or 8
    assert fp8_gemv_mma.fits(2304, 4, 8) and all(c[1][1] == 8 for c in sweep.sweep21_candidates(2304, 1))
    assert not fp8_gemv_mma.fits(1280, 64, 1)  # fewer blocks than warps
    for _, k in roofline.FP8_SHAPES:
        assert sweep.sweep19_candidates(k, 16) == []  # sweeps 19-23 timed M <= 8
        cands = sweep.sweep19_candidates(k, 8)
        assert cands and all(p == "gluon" and sweep._fits(k, p, c) for p, c in cands)
        assert sweep.fp8_gemm_mod.path_kernel("gluon") is fp8_gemv_mma.fp8_gemv_mma
    gluon = [e for e in tuning.table()["entries"] if e["path"] == "gluon"]
    assert gluon and all(e["m"] <= fp8_gemv_mma.TOKENS_MAX and fp8_gemv_mma.fits(e["k"], *e["config"]) for e in gluon)


def test_the_gluon_step_is_two_mma_sync_on_the_lane_s_own_words():
    from recipekit.backends.cuda_sm80.kernels import fp8_gemv_mma

    for fused in (True, False):
        asm = fp8_gemv_mma._step_asm(fused)
        assert asm.count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") == 2
        assert asm.count("prmt.b32") == 8 and asm.count("and.b32") == 8  # four words, two bf16 pairs each
        assert asm.count("fma.rn.f32") == (4 if fused else 0)
        assert asm.count("mul.rn.f32") == (0 if fused else 4)


def test_sweep_20_splits_k_over_programs_where_k_takes_it():
    from recipekit.backends.cuda_sm80.kernels import fp8_gemv_mma

    assert fp8_gemv_mma.fits(5120, 8, 4, 10) and not fp8_gemv_mma.fits(1280, 8, 4, 8)  # 40 blocks: not 64 runs
    for _, k in roofline.FP8_SHAPES:
        assert sweep.sweep20_candidates(k, 16) == []
        cands = sweep.sweep20_candidates(k, 1)
        assert cands and all(p == "gluon" and c[2] > 1 and sweep._fits(k, p, c) for p, c in cands)


def test_a_full_sweep_on_a_new_card_times_the_gluon_kernel_too():
    for n, k in roofline.FP8_SHAPES:
        full = sweep.candidates(n, k, 4, new_only=False)
        assert {p for p, _ in full} == {"gemv", "mma", "gluon"}
        at16 = [c for p, c in sweep.candidates(n, k, 16, new_only=False) if p == "gluon"]
        assert at16 and at16 == [c for _, c in sweep.sweep24_candidates(k, 16)]  # two token groups (sweep 24)
        assert sweep.sweep24_candidates(k, 8) == []


@pytest.fixture
def launched(monkeypatch) -> list[tuple[tuple[int, ...], dict]]:
    """fp8_gemv_mma's kernel replaced by a recorder: each launch's (grid, keyword arguments), nothing run."""
    from recipekit.backends.cuda_sm80.kernels import fp8_gemv_mma

    calls: list[tuple[tuple[int, ...], dict]] = []

    class Kernel:
        def __getitem__(self, g):
            return lambda *args, **kw: calls.append((g, kw))

    monkeypatch.setattr(fp8_gemv_mma, "fp8_gemv_mma_kernel", Kernel())
    return calls


@pytest.mark.parametrize(("config", "grid", "split"), [((4, 4), (320, 1), 1), ((2, 4, 4), (320, 4), 4)])
def test_fp8_gemv_mma_launches_the_config_it_is_given(monkeypatch, launched, config, grid, split):
    import torch

    from recipekit.backends.cuda_sm80.kernels import fp8_gemv_mma, serial

    monkeypatch.setattr(serial, "serial_counters", lambda device, tiles: torch.zeros(tiles, dtype=torch.int32))
    monkeypatch.setattr(fp8_gemv_mma, "serial_counters", serial.serial_counters)
    x = torch.zeros((1, 8192), dtype=torch.bfloat16)
    w = torch.zeros((5120, 8192), dtype=torch.uint8)
    s = torch.zeros((160, 256), dtype=torch.uint8)
    fp8_gemv_mma.fp8_gemv_mma(x, w, s, config)
    fp8_gemv_mma.fp8_gemv_mma(x, fp8_gemv_mma.pack(w), s, config)
    assert len(launched) == 2  # as stored, then packed
    for (g, kw), pk in zip(launched, (0, 1)):
        assert g == grid and (kw["SPLIT"], kw["num_warps"], kw["S"], kw["PK"], kw["TW"]) == (split, *config[:2], pk, 1)
        assert ("p_ptr" in kw) == (split > 1)


def test_fp8_gemv_mma_refuses_a_config_or_a_packed_weight_it_cannot_run():
    import torch

    from recipekit.backends.cuda_sm80.kernels import fp8_gemv_mma

    x, s = torch.zeros((1, 5120)), torch.zeros((2, 160))
    with pytest.raises(ValueError, match="config=\\(4, 4, 8, 1\\)"):  # the removed options' fields are refused
        fp8_gemv_mma.fp8_gemv_mma(x, torch.zeros((64, 5120), dtype=torch.uint8), s, (4, 4, 8, 1))
    with pytest.raises(ValueError, match="packed K=4096"):
        fp8_gemv_mma.fp8_gemv_mma(x, fp8_gemv_mma.pack(torch.zeros((64, 4096), dtype=torch.uint8)), s, (4, 4))
    assert not sweep._fits(5120, "gluon", (4, 4, 8, 1)) and sweep._fits(5120, "gluon", (4, 4, 8))


@pytest.mark.parametrize(("n", "k"), [(32, 64), (40, 96)])  # 40: rows past N padded to a tile
def test_pack_puts_each_lane_s_mma_words_in_its_16_bytes(n, k):
    import torch

    from recipekit.backends.cuda_sm80.kernels import fp8_gemv_mma

    w = torch.randint(0, 256, (n, k), dtype=torch.uint8, generator=torch.Generator().manual_seed(n))
    p = fp8_gemv_mma.pack(w)
    assert (p.n, p.k, p.shape) == (n, k, (n, k)) and tuple(p.data.shape) == (-(-n // 16), 16 * k)
    padded = torch.cat([w, w.new_zeros((16 * p.data.shape[0] - n, k))])
    for t in range(p.data.shape[0]):
        for b in range(k // 32):
            for lane in range(32):
                g, q = divmod(lane, 4)
                got = p.data[t, 512 * b + 16 * lane : 512 * b + 16 * lane + 16]
                rows = (
                    padded[16 * t + g, 32 * b + 8 * q : 32 * b + 8 * q + 8],
                    padded[16 * t + g + 8, 32 * b + 8 * q :][:8],
                )
                assert torch.equal(got, torch.cat(rows)), (t, b, lane)
    with pytest.raises(ValueError, match="K a multiple of 32"):
        fp8_gemv_mma.pack(w[:, :48])


def test_the_packed_table_holds_every_dsv41_shape_at_m_1_to_16_with_configs_k_takes():
    from recipekit.backends.cuda_sm80.kernels import fp8_gemv_mma

    entries = tuning.table(packed=True)["entries"]
    assert {(e["n"], e["k"], e["m"]) for e in entries} == {
        (n, k, m) for n, k in roofline.FP8_SHAPES for m in (1, 2, 4, 8, 16)
    }
    assert all(e["path"] == "gluon_packed" and fp8_gemv_mma.fits(e["k"], *e["config"]) for e in entries)
    card = entries[0]["card"]
    assert tuning.lookup(card, 8192, 4096, 1, packed=True) == ("gluon_packed", (4, 8, 1))
    assert tuning.lookup(card, 8192, 4096, 1)[0] == "gluon"  # the row layout's own table


def test_packed_weights_take_the_packed_table_or_the_first_fallback_k_takes(monkeypatch):
    from recipekit.backends.cuda_sm80.kernels import fp8_gemv_mma

    monkeypatch.setattr(tuning, "_card", lambda device: "NVIDIA H200")
    assert tuning.packed_choice(None, 5120, 2304, 1, fp8_gemv_mma.fits) == (4, 4, 1)  # the table's
    monkeypatch.setattr(tuning, "_card", lambda device: "NVIDIA CMP 170HX")
    assert tuning.packed_choice(None, 5120, 4096, 1, fp8_gemv_mma.fits) == (4, 8, 1)
    assert tuning.packed_choice(None, 64, 192, 1, fp8_gemv_mma.fits) == (2, 4, 1)  # 6 blocks: not over 4 warps
    assert tuning.packed_choice(None, 64, 96, 1, fp8_gemv_mma.fits) == (1, 4, 1)


def test_fp8_gemm_runs_a_packed_weight_on_the_mma_kernel_in_one_launch(monkeypatch):
    import torch

    from recipekit.backends.cuda_sm80.kernels import fp8_gemv_mma

    calls: list[tuple[int, object, tuple[int, ...]]] = []

    def kernel(x, w, s, config, fp_fusion=True):
        calls.append((x.shape[0], w, tuple(config)))
        return torch.zeros((x.shape[0], w.n), dtype=torch.bfloat16)

    monkeypatch.setattr(fp8_gemv_mma, "fp8_gemv_mma", kernel)
    monkeypatch.setattr(tuning, "_card", lambda device: "NVIDIA H200")
    w = fp8_gemv_mma.pack(torch.zeros((5120, 2304), dtype=torch.uint8))
    s = torch.zeros((160, 72), dtype=torch.uint8)
    y = sweep.fp8_gemm_mod.fp8_gemm(torch.zeros((16, 2304), dtype=torch.bfloat16), w, s)
    assert tuple(y.shape) == (16, 5120) and len(calls) == 1 and calls[0][0] == 16 and calls[0][1] is w
    assert calls[0][2] == tuning.packed_choice(None, 5120, 2304, 16, fp8_gemv_mma.fits)
    sweep.fp8_gemm_mod.fp8_gemm(torch.zeros((3, 2304), dtype=torch.bfloat16), w, s, config=(2, 8, 1))
    assert calls[-1][0] == 3 and calls[-1][2] == (2, 8, 1)


@pytest.mark.parametrize("m", [8, 9, 16])
def test_fp8_gemv_mma_takes_a_second_token_group_from_m_9(launched, m):
    import torch

    from recipekit.backends.cuda_sm80.kernels import fp8_gemv_mma

    s = torch.zeros((2, 32), dtype=torch.uint8)
    fp8_gemv_mma.fp8_gemv_mma(torch.zeros((m, 1024)), torch.zeros((64, 1024), dtype=torch.uint8), s, (4, 4))
    assert len(launched) == 1 and launched[0][1]["TW"] == (2 if m > 8 else 1)
    with pytest.raises(ValueError, match="M <= 16"):
        fp8_gemv_mma.fp8_gemv_mma(torch.zeros((17, 1024)), torch.zeros((64, 1024), dtype=torch.uint8), s, (4, 4))


def test_the_two_group_step_runs_the_same_a_against_both_token_groups():
    from recipekit.backends.cuda_sm80.kernels import fp8_gemv_mma

    for fused in (True, False):
        one, two = fp8_gemv_mma._step_asm(fused), fp8_gemv_mma._step_asm(fused, 2)
        assert two.count("mma.sync") == 4 and two.count("prmt.b32") == one.count("prmt.b32") == 8
        assert "{$16, $17}" in two and "{$18, $19}" in two and "{$20, $21}" in two and "{$22, $23}" in two
        assert all(f"${w}, %z" in two for w in (24, 25, 26, 27)) and "$28" in two
        outs = ("fma.rn.f32 ${}, " if fused else "add.rn.f32 ${}, ").format
        assert all(outs(i) in two for i in range(8)) and not any(outs(i) in one for i in range(4, 8))
