"""What a user reads from the CLI: errors as JSON with --format json (same exit code as the
one-line error), group help that lists every subcommand with its whole first paragraph, and
help text rewrapped by the formatter rather than cut where the source line ended."""

from __future__ import annotations

import json
import re

import pytest

CMP = "deepseek-v4.1-flash-1017-cmp170hx-4x"
KEYS = {"code", "message", "hint", "location"}


def test_a_not_found_error_is_a_json_object_with_the_same_exit_code(run_cli):
    human = run_cli("render", "no-such-recipe")
    code, out, err = run_cli("render", "no-such-recipe", "--format", "json")
    assert code == human[0] == 6
    doc = json.loads(out)
    assert set(doc) == {"error"} and set(doc["error"]) == KEYS
    assert doc["error"]["code"] == "recipe-not-found" and "no-such-recipe" in doc["error"]["message"]
    assert doc["error"]["hint"].startswith("known ids:")
    assert err.startswith("error[recipe-not-found]")  # the one line stays on stderr
    assert human[1] == ""  # human mode: nothing on stdout


def test_several_problems_give_the_first_and_the_list(run_cli, tmp_path):
    envf = tmp_path / ".env"
    envf.write_text("$(touch x)\nA='open\n")
    code, out, err = run_cli("render", CMP, "--env-file", str(envf), "-f", "json")
    assert code == 2
    doc = json.loads(out)
    assert doc["error"]["code"] == "env-line-invalid" and doc["error"]["location"] == f"{envf}:1"
    assert [e["code"] for e in doc["errors"]] == ["env-line-invalid", "env-unterminated-quote"]


@pytest.mark.parametrize("args", [("list", "--bogus", "--format=json"), ("render", "-f", "json", CMP, "--layout")])
def test_a_usage_error_is_json_too(run_cli, args):
    code, out, err = run_cli(*args)
    assert code == 2
    doc = json.loads(out)
    assert doc["error"]["code"] == "usage" and set(doc["error"]) == KEYS
    assert ("--bogus" if "--bogus" in args else "--layout") in doc["error"]["message"]


def test_json_is_asked_for_by_either_spelling():
    from recipekit.cli.dispatch import wants_json

    assert wants_json(["x", "-f", "json"]) and wants_json(["--format=json"]) and not wants_json(["--", "-f", "json"])
    assert not wants_json(["-f", "human"])


def _subcommands(grp) -> dict:
    import typer

    ctx = typer.Context(grp)
    return {name: grp.get_command(ctx, name) for name in grp.list_commands(ctx)}


def _groups():
    import typer.main

    from recipekit.cli.app import app

    root = typer.main.get_command(app)
    todo, out = [((), root)], []
    while todo:
        path, grp = todo.pop()
        out.append((path, grp))
        for name, cmd in _subcommands(grp).items():
            if hasattr(cmd, "commands"):
                todo.append(((*path, name), cmd))
    return out


def _collapse(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()


def test_every_group_help_lists_every_subcommand_with_its_first_paragraph(run_cli, monkeypatch):
    from recipekit.cli.help import first_paragraph

    monkeypatch.setenv("COLUMNS", "100")
    groups = _groups()
    assert {p for p, _ in groups} >= {(), ("patches",), ("patches", "catalog"), ("pins",), ("checkpoint",), ("engram",)}
    for path, grp in groups:
        code, out, err = run_cli(*path, "--help")
        assert code == 0, (path, err)
        section = out.split("Commands:\n", 1)[1]
        listed = _collapse(section)
        for name, cmd in _subcommands(grp).items():
            assert re.search(rf"^  {re.escape(name)}\s", section, re.M), (path, name)
            para = first_paragraph(cmd.help or "")
            assert para and f"{name} {_collapse(para)}" in listed, (path, name, para)
        assert "..." not in section, path


def test_help_text_is_rewrapped_not_cut_where_the_source_line_ends(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # the formatter's width is then 120 (max_content_width)
    code, out, _ = run_cli("doctor", "--help")
    assert code == 0
    description = out.split("\n\n")[1]
    lines = description.splitlines()
    assert len(lines) >= 2
    # each line but the last is filled to near the width: the breaks are the formatter's
    assert all(len(line) > 90 for line in lines[:-1]), lines
    code, out, _ = run_cli("--help")
    doctor = out[out.index("  doctor ") :].split("\n  fetch ")[0].splitlines()
    assert all(len(line) > 90 for line in doctor[:-1]), doctor


def test_the_root_summaries_are_the_commands_own_first_paragraphs():
    """`recipe --help` prints COMMANDS' summaries without importing the commands: each must say
    what the command's own help says."""
    import typer.main

    from recipekit.cli.app import COMMANDS, app, load_group
    from recipekit.cli.help import first_paragraph

    for name, (modules, summary) in COMMANDS.items():
        cmd = load_group(modules).commands.get(name)
        assert cmd is not None, f"{name}: not defined by {modules}"
        assert summary == first_paragraph(cmd.help or ""), name
    root = typer.main.get_command(app)
    assert set(_subcommands(root)) == {"version", *COMMANDS}


def test_help_loads_no_command_module():
    import subprocess
    import sys

    code = (
        "import sys\nfrom recipekit.cli.main import main\nmain(['--help'])\n"
        "print('LOADED', sorted(m for m in sys.modules if m.startswith('recipekit.cli.') "
        "and m not in ('recipekit.cli.main', 'recipekit.cli.root_help', 'recipekit.cli.app', 'recipekit.cli.help')))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "LOADED []" in r.stdout, r.stdout + r.stderr


def _all_commands():
    for path, grp in _groups():
        for name, cmd in _subcommands(grp).items():
            if not hasattr(cmd, "commands"):
                yield (*path, name), cmd


# parameters that name a file or folder, by their (python) name
PATH_PARAMS = {
    "out",
    "out_dir",
    "dst",
    "src",
    "folder",
    "like",
    "official",
    "exl3",
    "bf16",
    "env_file",
    "workdir",
    "model_dir",
    "tokenizer",
    "target",
    "state_dir",
    "venv",
    "patch_file",
    "paths",
    "ckpt",
    "store_dir",
    "site_packages",
    "source",
}


NOT_PATHS = {
    (("checkpoint", "convert"), "target"),  # a layout name
    (("fetch",), "source"),  # a source id
    (("engram", "rows"), "target"),  # a checkpoint folder or a recipe id
    (("engram", "warm"), "target"),  # a recipe id or a folder
}


def _is_path(annotation) -> bool:
    import typing
    from pathlib import Path

    return annotation is Path or any(_is_path(a) for a in typing.get_args(annotation))


def test_path_options_are_paths_and_fixed_sets_are_choices(run_cli, tmp_path):
    seen = set()
    for path, cmd in _all_commands():
        for p in cmd.params:
            if p.name in PATH_PARAMS and (path, p.name) not in NOT_PATHS:
                seen.add(p.name)
                assert _is_path(p.type_descriptor.annotation), (path, p.name, p.type_descriptor.annotation)
    assert seen >= {"out", "src", "dst", "env_file", "patch_file", "venv", "target"}
    code, out, err = run_cli("patches", "describe", str(tmp_path / "nope.diff"), "--engine-dir", str(tmp_path))
    assert code == 2 and "does not exist" in err
    code, out, err = run_cli(
        "checkpoint", "make-tiny-exl3", "--like", str(tmp_path), "--out", str(tmp_path / "o"), "--codebook", "zzz"
    )
    assert code == 2 and "'zzz' is not one of 'mcg', 'mul1'" in err
    code, out, err = run_cli(
        "checkpoint", "convert", "--src", str(tmp_path), "--dst", str(tmp_path / "d"), "--target", "cuda"
    )
    assert code == 2 and "'cuda'" in err and "gaudi" in err
