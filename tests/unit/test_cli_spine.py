"""The CLI: list/show/lint/render/export, JSON output, one-line errors with exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CPU_YAML = REPO / "recipes" / "local" / "tiny-deepseek-cpu.yaml"
CMP = "deepseek-v4.1-flash-1017-cmp170hx-4x"


def test_list_json(run_cli):
    code, out, err = run_cli("list", "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert isinstance(rows, list) and len(rows) == 3
    for r in rows:
        assert {"id", "backend", "model", "hardware"} <= set(r)
    assert {r["id"]: r["backend"] for r in rows}["tiny-deepseek-cpu"] == "cpu"


def test_list_human(run_cli):
    code, out, _ = run_cli("list")
    assert code == 0 and "deepseek-v4.1-flash-1017-gaudi2-8x" in out and "cuda_sm80" in out


def test_show_effective_json_has_every_value_with_source(run_cli):
    code, out, err = run_cli(
        "show",
        CMP,
        "--layout",
        "pp4",
        "--effective",
        "--format",
        "json",
        "--set",
        "PORT=9001",
        env={"NCCL_P2P_LEVEL": "PIX"},
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["layout"] == "pp4" and data["content_hash"].startswith("sha256:")
    vals = {(v["kind"], v["key"]): v for v in data["values"]}
    assert vals[("setting", "PORT")]["value"] == 9001 and vals[("setting", "PORT")]["source"] == "--set"
    assert vals[("env", "NCCL_P2P_LEVEL")]["value"] == "PIX" and vals[("env", "NCCL_P2P_LEVEL")]["source"] == "env"
    assert vals[("setting", "CUDAGRAPH_MODE")]["source"] == "layout:pp4"
    assert vals[("arg", "--compilation-config")]["value"]["cudagraph_mode"] == "PIECEWISE"
    assert all(v["source"] for v in data["values"])


def test_show_human(run_cli):
    code, out, _ = run_cli("show", "deepseek-v4.1-flash-1017-gaudi2-8x")
    assert code == 0 and "async-scheduling-off" in out and "058f107" in out


def test_render_json_and_out_file(run_cli, tmp_path):
    code, out, err = run_cli("render", CMP, "--artifact", "docker", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["argv"][:3] == ["docker", "run", "-d"] and data["shell"].startswith("docker run -d")
    target = tmp_path / "launch.sh"
    code, out, _ = run_cli("render", "tiny-deepseek-cpu", "--out", str(target))
    assert code == 0 and target.read_text() == out


def test_render_refuses_a_violation_in_one_line(run_cli, tmp_path):
    target = tmp_path / "never.sh"
    code, out, err = run_cli(
        "render", "deepseek-v4.1-flash-1017-gaudi2-8x", "--set", "!--enforce-eager", "--out", str(target)
    )
    assert code == 2 and out == ""
    assert err.startswith("error[constraint-enforce-eager-kept] deepseek-v4.1-flash-1017-gaudi2-8x")
    assert "Traceback" not in err and not target.exists()


def test_bad_env_file_exit_2_one_line_per_problem(run_cli, tmp_path):
    envf = tmp_path / ".env"
    envf.write_text("LAYOUT=pp4\n$(touch x)\nA='open\n")
    code, out, err = run_cli("render", CMP, "--env-file", str(envf))
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"error[env-line-invalid] {envf}:2: not KEY=VALUE: '$(touch x)' (hint: write KEY=VALUE (the file is read as data, not run))",
        f"error[env-unterminated-quote] {envf}:3: A: the ' quote is not closed (hint: close the quote on the same line)",
    ]


def test_lint_bad_file_exit_2_no_traceback(run_cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        CPU_YAML.read_text()
        .replace("status: local", "status: local\nstatus: local", 1)
        .replace("backend: cpu", "backend: gpu")
    )
    code, out, err = run_cli("lint", str(bad))
    assert code == 2
    assert err.strip().startswith("error[duplicate-key]") and "Traceback" not in err
    code, out, err = run_cli("lint", str(bad), "--format", "json")
    assert code == 2 and json.loads(out)["errors"][0]["code"] == "duplicate-key"
    code, out, err = run_cli("lint")
    assert code == 0 and "3 file(s), 0 problem(s)" in out


def test_export_cli_identical_runs(run_cli, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_cli("export", "--out", str(a))[0] == 0
    assert run_cli("export", "--out", str(b), "--format", "json")[0] == 0
    fa = sorted(p.relative_to(a) for p in a.rglob("*.json"))
    assert fa == sorted(p.relative_to(b) for p in b.rglob("*.json")) and len(fa) == 5
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in fa)


def test_unknown_recipe_exit_6(run_cli):
    code, _, err = run_cli("show", "nope-nothing")
    assert code == 6 and err.startswith("error[recipe-not-found]")
