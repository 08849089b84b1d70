"""The no-FMA-contraction variant choice on recorded figures: a throttled CMP 170HX turns fusion off,
an H200 keeps it, missing figures keep the compiler's default."""

from __future__ import annotations

from recipekit.bench.kernels import variant

# stock CMP 170HX (niconiconi review; FluidX3D issue 8): FMA 0.39 TFLOPS, non-FMA FP32 6.25 TFLOPS
CMP_STOCK = {"ffma_tflops": 0.39, "fmul_fadd_tflops": 6.25, "hfma_tflops": 42.0, "mma_fp16_tflops": 6.3}


def test_throttled_fma_turns_contraction_off():
    c = variant.choose(CMP_STOCK)
    assert c["enable_fp_fusion"] is False
    assert c["why"].startswith("FFMA 0.39 TFLOPS < 0.9 x FMUL+FADD 6.25")


def test_healthy_card_keeps_fma():
    # an unthrottled card: FMA one instruction, mul+add two -> FMA near twice the pair's rate
    c = variant.choose({"ffma_tflops": 60.0, "fmul_fadd_tflops": 31.0})
    assert c["enable_fp_fusion"] is True


def test_boundary_and_missing_figures():
    assert variant.choose({"ffma_tflops": 0.9, "fmul_fadd_tflops": 1.0})["enable_fp_fusion"] is True
    assert variant.choose({"ffma_tflops": 0.89, "fmul_fadd_tflops": 1.0})["enable_fp_fusion"] is False
    for bad in (
        {},
        {"ffma_tflops": float("nan"), "fmul_fadd_tflops": 1.0},
        {"ffma_tflops": "x", "fmul_fadd_tflops": 1},
    ):
        c = variant.choose(bad)
        assert c["enable_fp_fusion"] is True and c["why"].startswith("no FFMA/FMUL+FADD figures")


def test_recipe_record_checked_against_the_measured_choice():
    off = variant.choose(CMP_STOCK)
    on = variant.choose({"ffma_tflops": 60.0, "fmul_fadd_tflops": 31.0})
    assert variant.against_recipe(off, "off")["status"] == "ok"
    assert variant.against_recipe(off, "auto")["status"] == "ok"
    bad = variant.against_recipe(off, "on")
    assert bad["status"] == "warn" and bad["want"] == "off"
    assert bad["why"].endswith("--set KERNELS_FP_FUSION=off")
    assert variant.against_recipe(on, "OFF")["status"] == "warn"
    assert variant.against_recipe(on, None)["status"] == "info"


def test_cmp_recipe_records_the_variant_setting():
    from recipekit.cli.common import deployment

    eff = deployment("deepseek-v4.1-flash-1017-cmp170hx-4x", None, None, None, None).eff
    assert eff.setting(variant.SETTING) == "auto"


def test_doctor_microbench_reads_the_workers_cards(tmp_path):
    """The worker's JSON lines (recorded throttled CMP figures from a stand-in python) become cards whose
    variant is chosen here; a non-JSON line is skipped."""
    import json
    import sys

    from recipekit.cli import microbench

    fake = tmp_path / "fakepy"
    line = json.dumps({"index": 0, "card": "NVIDIA CMP 170HX", **CMP_STOCK})
    fake.write_text(f"#!{sys.executable}\nprint('warming up')\nprint({line!r})\n")
    fake.chmod(0o755)
    cards, _ = microbench.measure(str(fake), 1.0, 30.0)
    assert [c["card"] for c in cards] == ["NVIDIA CMP 170HX"]
    assert variant.choose(cards[0])["enable_fp_fusion"] is False


def _fake_torch_python(tmp_path, card_line: str):
    """A stand-in for the engine's python: answers the doctor's torch query (cuda: true) and, run on the
    worker file, prints the recorded figures of a stock CMP 170HX."""
    import json
    import sys

    fake = tmp_path / "fakepy"
    info = json.dumps({"torch": "2.11.0", "cuda": True, "devices": 1})
    fake.write_text(f"#!{sys.executable}\nimport sys\nprint({info!r} if sys.argv[1:2] == ['-c'] else {card_line!r})\n")
    fake.chmod(0o755)
    return fake


def test_doctor_microbench_warns_when_the_recipe_records_the_other_variant(tmp_path, run_cli):
    import json

    line = json.dumps({"index": 0, "card": "NVIDIA CMP 170HX", **CMP_STOCK})
    fake = _fake_torch_python(tmp_path, line)
    ref = "deepseek-v4.1-flash-1017-cmp170hx-4x"
    code, out, err = run_cli(
        "doctor", ref, "--microbench", "--python", str(fake), "--set", "KERNELS_FP_FUSION=on", "-f", "json"
    )
    assert code == 0, err
    card = json.loads(out)["cards"][0]
    assert card["variant"]["enable_fp_fusion"] is False
    assert card["recipe"]["status"] == "warn" and card["recipe"]["want"] == "off"
    code, out, _ = run_cli("doctor", ref, "--microbench", "--python", str(fake), "-f", "json")
    assert json.loads(out)["cards"][0]["recipe"]["status"] == "ok"  # auto: the kernels take the measured choice


def test_doctor_microbench_without_a_torch_python_is_a_named_error(tmp_path, run_cli):
    code, _, err = run_cli("doctor", "--microbench", "--python", str(tmp_path / "nopython"))
    assert code == 3
    assert "error[microbench-no-cuda]" in err
