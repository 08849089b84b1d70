"""mxfp4_moe.moe_launches' choices that need no GPU: the default (TILE 14 + MASKLESS) unmasks a launch's loads only
where the shape divides its tile, and configurations that cannot go together are refused."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from recipekit.backends.cuda_sm80.kernels import mxfp4_moe  # noqa: E402


def _launches(hidden: int, inter: int, config: tuple[int, ...] | None = None) -> dict[str, dict]:
    experts, m, topk = 4, 1, 2
    x = torch.zeros((m, hidden), dtype=torch.bfloat16)
    sel = torch.zeros((m, topk), dtype=torch.int32)
    wts = torch.ones((m, topk))
    w13 = torch.zeros((experts, 2 * inter, hidden // 2), dtype=torch.uint8)
    s13 = torch.zeros((experts, 2 * inter, hidden // 32), dtype=torch.uint8)
    w2 = torch.zeros((experts, hidden, inter // 2), dtype=torch.uint8)
    s2 = torch.zeros((experts, hidden, inter // 32), dtype=torch.uint8)
    launches, _ = mxfp4_moe.moe_launches(x, sel, wts, w13, s13, w2, s2, 10.0, config)
    return {name: fn.keywords for name, fn in launches if hasattr(fn, "keywords")}


def test_the_default_unmasks_only_the_launches_whose_shape_divides_the_tile():
    # DSV4.1-Flash: 5120 / 8 = 640 words per up row (5 steps of 128), 2304 / 8 = 288 per down row (9 of 32)
    full = _launches(5120, 2304, mxfp4_moe.DEFAULT_CONFIG)
    assert (full["up"]["EVEN"], full["down"]["EVEN"]) == (1, 1)
    assert (full["up"]["HWORDS"], full["down"]["HWORDS"]) == (1, 1)
    # the default parity shape: 512 / 8 = 64 words per up row, less than one step: the up launch stays masked
    small = _launches(512, 256, mxfp4_moe.DEFAULT_CONFIG)
    assert (small["up"]["EVEN"], small["down"]["EVEN"]) == (0, 1)
    # hidden 1088: 136 words per up row (not a multiple of 128); inter 48: 6 words per down row (less than one step
    # of 32) and not a multiple of the up launch's 16 gate rows
    ragged = _launches(1088, 48)
    assert (ragged["up"]["EVEN"], ragged["down"]["EVEN"]) == (0, 0)
    # TILE 14 without MASKLESS keeps every mask
    masked = _launches(5120, 2304, mxfp4_moe.TILE14_CONFIG)
    assert (masked["up"]["EVEN"], masked["down"]["EVEN"]) == (0, 0)


def test_tile_14_refuses_a_fused_sum_split_k_or_prefetch():
    base = mxfp4_moe.TILE14_CONFIG + (0, 1, 0, 0, 0)
    for cfg in (base[:8] + (1,) + base[9:], base[:9] + (3,) + base[10:], base[:12] + (1,)):
        with pytest.raises(ValueError, match="TILE 14 has no fused sum, split-K or prefetch"):
            _launches(5120, 2304, cfg)


def test_serial_drops_the_sum_launch_and_hands_the_down_launch_its_counters():
    experts, m, topk, hidden, inter = 4, 3, 2, 512, 256
    args = (
        torch.zeros((m, hidden), dtype=torch.bfloat16), torch.zeros((m, topk), dtype=torch.int32),
        torch.ones((m, topk)), torch.zeros((experts, 2 * inter, hidden // 2), dtype=torch.uint8),
        torch.zeros((experts, 2 * inter, hidden // 32), dtype=torch.uint8),
        torch.zeros((experts, hidden, inter // 2), dtype=torch.uint8),
        torch.zeros((experts, hidden, inter // 32), dtype=torch.uint8), 10.0,
    )  # fmt: skip
    plain, y0 = mxfp4_moe.moe_launches(*args, mxfp4_moe.MASKLESS_CONFIG)
    serial, y1 = mxfp4_moe.moe_launches(*args, mxfp4_moe.SERIAL_CONFIG)
    assert [n for n, _ in plain] == ["up", "down", "sum"] and [n for n, _ in serial] == ["up", "down"]
    # the default: serial at M = 1 only (3 tokens here: the sum launch; one token: none)
    assert [n for n, _ in mxfp4_moe.moe_launches(*args, None)[0]] == ["up", "down", "sum"]
    one = (args[0][:1], args[1][:1], args[2][:1]) + args[3:]
    assert [n for n, _ in mxfp4_moe.moe_launches(*one, mxfp4_moe.DEFAULT_CONFIG)[0]] == ["up", "down"]
    down = dict(serial)["down"]
    assert down.keywords["SERIAL"] == 1 and dict(plain)["down"].keywords["SERIAL"] == 0
    # positional: h, sel, w2, s2, partials, the bf16 result, the counters (one per token and 64-row block)
    result, counters = down.args[5], down.args[6]
    assert result is y1 and counters.dtype == torch.int32 and counters.numel() == m * (hidden // 64)
    assert int(counters.abs().sum()) == 0


def test_staged_loads_reach_the_tile_14_launches_only():
    staged = _launches(5120, 2304, mxfp4_moe.SERIAL_M1_CONFIG + (3, 2))
    assert (staged["up"]["STAGES"], staged["down"]["STAGES"]) == (3, 2)
    default = _launches(5120, 2304, mxfp4_moe.DEFAULT_CONFIG)  # session 36: the up launch staged 3 deep
    assert (default["up"]["STAGES"], default["down"]["STAGES"]) == (3, 1)
    plain = _launches(5120, 2304, mxfp4_moe.SERIAL_M1_CONFIG)
    assert (plain["up"]["STAGES"], plain["down"]["STAGES"]) == (1, 1)
    zero = _launches(5120, 2304, mxfp4_moe.SERIAL_M1_CONFIG + (0, 0))  # 0: none, as 1
    assert (zero["up"]["STAGES"], zero["down"]["STAGES"]) == (1, 1)
    tile6 = mxfp4_moe.TILE6_CONFIG + (0,) * (17 - len(mxfp4_moe.TILE6_CONFIG)) + (3, 3)  # not TILE 14: ignored
    other = _launches(5120, 2304, tile6)
    assert (other["up"]["STAGES"], other["down"]["STAGES"]) == (1, 1)


def test_fp8_staged_loads_run_in_the_register_tile_only():
    from recipekit.backends.cuda_sm80.kernels import fp8_gemm

    x, w, s = torch.zeros((1, 1024), dtype=torch.bfloat16), torch.zeros((64, 1024), dtype=torch.uint8), None
    with pytest.raises(ValueError, match="STAGES runs in the register tile"):
        fp8_gemm.fp8_gemv(x, w, s, (16, 512, 4, 1, 2, 0, 2, 0, 0, 3))


def test_the_l2_prefetch_reaches_the_up_launch_up_to_its_token_count_with_the_down_weights_bytes():
    base = mxfp4_moe.DEFAULT_CONFIG
    on = _launches(5120, 2304, base + (1, 6, 1, 0))
    up = on["up"]
    assert (up["L2"], up["L2_SHARE"], up["L2_AT"], up["EVICT"]) == (1, 6, 1, 0)
    # the expert's w2 bytes (5120 rows x 1152 bytes) and its scale codes (5120 x 72), as bytes
    assert (up["w2_bytes"], up["s2_bytes"]) == (5120 * 1152, 5120 * 72)
    assert up["w2b_ptr"].dtype == torch.uint8 and up["w2b_ptr"].shape == (4, 5120, 1152)
    # M = 1 tokens here, prefetch up to M = 0 (off): no prefetch; share 0 means all 8 eighths
    assert _launches(5120, 2304, base + (0, 8, 0, 0))["up"]["L2"] == 0
    assert _launches(5120, 2304, base + (1, 0))["up"]["L2_SHARE"] == 8
    assert _launches(5120, 2304, mxfp4_moe.DEFAULT_CONFIG)["up"]["L2"] == 0  # the default does not prefetch
    # evict_first goes with unmasked word loads only (hidden 1088: masked)
    assert _launches(5120, 2304, base + (1, 8, 0, 1))["up"]["EVICT"] == 1
    assert _launches(1088, 48, base + (1, 8, 0, 1))["up"]["EVICT"] == 0
    # not TILE 14: no prefetch
    tile6 = mxfp4_moe.TILE6_CONFIG + (0,) * (19 - len(mxfp4_moe.TILE6_CONFIG)) + (1, 8, 0, 0)
    assert _launches(5120, 2304, tile6)["up"]["L2"] == 0


def test_the_l2_prefetch_refuses_a_share_or_place_out_of_range():
    for tail in ((1, 9, 0, 0), (1, 8, 2, 0), (1, -1, 0, 0)):
        with pytest.raises(ValueError, match="the L2 prefetch's share is 1..8 eighths and its place 0 or 1"):
            _launches(5120, 2304, mxfp4_moe.DEFAULT_CONFIG + tail)


def test_the_tl_dot_tiles_keep_their_mma_launches_beside_the_mma_sync_indices():
    # TILE 8 / 10: both launches through tl.dot (MMA 1 / 2); indices 23 and 26 are another path (mxfp4_moe_mma)
    for tile, mma in ((8, 1), (10, 2)):
        cfg = mxfp4_moe.TILE14_CONFIG[:5] + (tile,) + mxfp4_moe.TILE14_CONFIG[6:]
        got = _launches(512, 256, cfg)
        assert (got["up"]["MMA"], got["down"]["MMA"]) == (mma, mma)
    pad = mxfp4_moe.DEFAULT_CONFIG + (0,) * (23 - len(mxfp4_moe.DEFAULT_CONFIG))
    both = _launches(512, 256, pad + (1, 8, 2, 1, 4, 1))
    assert both["up"]["S"] == 2 and both["up"]["PF"] == 0
    # one token: the default's serial sum reaches the tensor-core down launch too (no sum launch); [26] 2 / 3: h in bf16
    assert both["down"]["INTER"] == 256 and both["down"]["S"] == 1 and "sum" not in both
    assert (both["down"]["SERIAL"], both["down"]["HB"], both["down"]["PF"]) == (1, 0, 0)
    hb = _launches(512, 256, pad + (1, 8, 2, 3, 4, 1))
    assert (hb["down"]["HB"], hb["down"]["PF"]) == (1, 1)
    three = mxfp4_moe.moe_launches(*_moe_args(3, 2), pad + (1, 8, 2, 1, 4, 1))[0]
    assert [n for n, _ in three] == ["up", "down", "sum"] and dict(three)["down"].keywords["SERIAL"] == 0


def _moe_args(m: int, topk: int, hidden: int = 512, inter: int = 256, experts: int = 8) -> tuple:
    return (
        torch.zeros((m, hidden), dtype=torch.bfloat16), torch.arange(m * topk, dtype=torch.int32).reshape(m, topk) % 8,
        torch.ones((m, topk)), torch.zeros((experts, 2 * inter, hidden // 2), dtype=torch.uint8),
        torch.zeros((experts, 2 * inter, hidden // 32), dtype=torch.uint8),
        torch.zeros((experts, hidden, inter // 2), dtype=torch.uint8),
        torch.zeros((experts, hidden, inter // 32), dtype=torch.uint8), 10.0,
    )  # fmt: skip


def test_slot_groups_give_each_group_its_slots_and_share_one_set_of_partials():
    groups = mxfp4_moe.DEFAULT_CONFIG + (0,) * (30 - len(mxfp4_moe.DEFAULT_CONFIG))
    args = _moe_args(1, 6)
    streams, tail, y = mxfp4_moe.moe_plan(*args, groups + (2,))
    assert [[n for n, _ in s] for s in streams] == [["up0", "down0"], ["up1", "down1"]] and tail == []
    (_, up0), (_, down0) = streams[0]
    (_, up1), (_, down1) = streams[1]
    # each group's up launch reads its own three slots of the routing (views, no copy) and writes its own h
    assert (up0.args[1].data_ptr(), up1.args[1].data_ptr()) == (args[1].data_ptr(), args[1].data_ptr() + 3 * 4)
    assert up0.args[1].tolist() == [[0, 1, 2]] and up1.args[1].tolist() == [[3, 4, 5]]
    assert up0.keywords["TOPK"] == up1.keywords["TOPK"] == 3 and up0.args[5] is down0.args[0]
    # the down launches: partials SLOT0.. of all 6, one result, one set of counters, the serial sum waiting for all 6
    assert (down0.keywords["SLOT0"], down1.keywords["SLOT0"]) == (0, 3)
    assert down0.keywords["NSLOT"] == down1.keywords["NSLOT"] == 6 and down0.keywords["SERIAL"] == 1
    assert down0.args[4] is down1.args[4] and down0.args[4].shape[0] == 6
    assert down0.args[5] is down1.args[5] is y and down0.args[6] is down1.args[6]
    # three groups of two; without the serial sum (index 16: 0) the sum launch is the tail, over all 6 partials
    three, _, _ = mxfp4_moe.moe_plan(*args, groups + (3,))
    assert [n for s in three for n, _ in s] == ["up0", "down0", "up1", "down1", "up2", "down2"]
    plain = groups[:16] + (0,) + groups[17:] + (2,)
    streams, tail, _ = mxfp4_moe.moe_plan(*args, plain)
    assert [n for n, _ in tail] == ["sum"] and tail[0][1].keywords["SPLIT"] == 6
    assert [n for n, _ in mxfp4_moe.moe_launches(*args, plain)[0]] == ["up0", "down0", "up1", "down1", "sum"]


def test_slot_groups_apply_at_one_token_and_refuse_what_they_cannot_split():
    groups = mxfp4_moe.DEFAULT_CONFIG + (0,) * (30 - len(mxfp4_moe.DEFAULT_CONFIG))
    streams, tail, _ = mxfp4_moe.moe_plan(*_moe_args(3, 6), groups + (2,))
    assert [n for n, _ in streams[0]] == ["up", "down", "sum"] and len(streams) == 1 and tail == []
    # groups that do not divide the slots: their greatest common divisor (6 slots in 4: 2 groups; 8 in 3: none)
    assert len(mxfp4_moe.moe_plan(*_moe_args(1, 6), groups + (4,))[0]) == 2
    assert len(mxfp4_moe.moe_plan(*_moe_args(1, 8), groups + (3,))[0]) == 1
    with pytest.raises(ValueError, match="slot groups take TILE 14"):
        mxfp4_moe.moe_plan(*_moe_args(1, 6), mxfp4_moe.TILE6_CONFIG + (0,) * 15 + (3,))
    # the tensor-core down launch (4 warps: 8-row blocks) in groups: the shared counters, one per row block
    mma = groups[:23] + (1, 8, 2, 2, 4, 1) + groups[29:]
    streams, tail, y = mxfp4_moe.moe_plan(*_moe_args(1, 6), mma + (3,))
    downs = [s[1][1] for s in streams]
    assert [(d.keywords["SLOT0"], d.keywords["NSLOT"], d.keywords["SERIAL"]) for d in downs] == [
        (0, 6, 1),
        (2, 6, 1),
        (4, 6, 1),
    ]
    assert tail == [] and all(d.keywords["y_ptr"] is y for d in downs) and downs[0].args[4].shape[0] == 6
    assert downs[0].keywords["cnt_ptr"] is downs[2].keywords["cnt_ptr"]
    assert downs[0].keywords["cnt_ptr"].numel() == 512 // 8


def test_the_default_at_one_token_is_three_groups_on_the_tensor_cores_and_larger_m_keep_tile_14():
    assert mxfp4_moe.default_config(1, 5120) == mxfp4_moe.DEFAULT_M1_CONFIG
    assert mxfp4_moe.default_config(2, 5120) == mxfp4_moe.default_config(16, 5120) == mxfp4_moe.DEFAULT_CONFIG
    # a hidden size the tensor-core up launch cannot take (not a multiple of 256): TILE 14 at one token too
    assert mxfp4_moe.default_config(1, 1088) == mxfp4_moe.DEFAULT_CONFIG
    streams, tail, _ = mxfp4_moe.moe_plan(*_moe_args(1, 6), None)
    assert [n for s in streams for n, _ in s] == ["up0", "down0", "up1", "down1", "up2", "down2"] and tail == []
    up, down = streams[0][0][1], streams[0][1][1]
    assert (up.keywords["S"], up.keywords["num_warps"], up.keywords["TOPK"]) == (2, 8, 2)  # mxfp4_moe_mma's up
    # its down launch: fp16 h (HB 2), the next loads first, 2 steps, 8 warps, the serial sum of all 6 slots
    kw = down.keywords
    assert (kw["HB"], kw["PF"], kw["S"], kw["num_warps"], kw["SERIAL"], kw["NSLOT"]) == (2, 1, 2, 8, 1, 6)
    # a SwiGLU limit above 64 (fp16 h could overflow): TILE 14 at one token too; asked for, the fp16 launch refuses it
    assert mxfp4_moe.default_config(1, 5120, 100.0) == mxfp4_moe.DEFAULT_CONFIG
    with pytest.raises(ValueError, match="SwiGLU limit up to 64"):
        mxfp4_moe.moe_plan(*_moe_args(1, 6)[:-1], 100.0, mxfp4_moe.DEFAULT_M1_CONFIG)
    streams, tail, _ = mxfp4_moe.moe_plan(*_moe_args(2, 6), None)  # two tokens: TILE 14, 64-row down programs
    assert [n for n, _ in streams[0]] == ["up", "down", "sum"] and streams[0][1][1].keywords["BLOCK_N"] == 64


def test_the_bench_times_both_defaults():
    from recipekit.bench.kernels import roofline

    assert mxfp4_moe.DEFAULT_M1_CONFIG in roofline.MOE_CONFIGS and mxfp4_moe.DEFAULT_CONFIG in roofline.MOE_CONFIGS
