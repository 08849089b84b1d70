"""`recipe`, `recipe --help` and `recipe -h` are answered without typer (recipekit/cli/root_help.py):
the page must say what typer's own root help says (same usage, options, commands and summaries,
laid out the same), and the fast path must not import typer, click or rich."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from recipekit.cli import root_help

WIDTHS = ["50", "80", "100", "200"]


def typer_page(args: list[str]) -> tuple[int, str, str]:
    """The page typer itself prints for `args` (the fast path bypassed)."""
    from recipekit.cli.dispatch import dispatch

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = dispatch(args, in_process=True)
    return code, out.getvalue(), err.getvalue()


def parse_page(page: str) -> dict:
    """A help page as data: its usage line, description, and each section's name -> text
    (continuation lines joined), so two pages compare by what they say."""
    blocks = page.strip("\n").split("\n\n")
    doc: dict = {"usage": " ".join(blocks[0].split()), "description": " ".join(blocks[1].split()), "sections": {}}
    for block in blocks[2:]:
        head, *rows = block.splitlines()
        assert head.endswith(":"), head
        entries: dict[str, str] = {}
        name = None
        for row in rows:
            m = re.match(r"^  (\S+(?:, \S+)*)(?:\s{2,}(.*))?$", row)
            if m and not row.startswith("   "):
                name = m.group(1)
                entries[name] = m.group(2) or ""
            else:
                assert name is not None, row
                entries[name] = f"{entries[name]} {row.strip()}".strip()
        doc["sections"][head[:-1]] = entries
    return doc


@pytest.mark.parametrize("columns", WIDTHS)
def test_the_fast_page_says_what_typers_page_says(monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    code, typer_out, _ = typer_page(["--help"])
    assert code == 0
    fast = parse_page(root_help.render())
    slow = parse_page(typer_out)
    assert set(fast["sections"]["Commands"]) == set(slow["sections"]["Commands"])  # the same commands
    assert fast["sections"]["Commands"] == slow["sections"]["Commands"]  # with the same summaries
    assert fast["sections"]["Options"] == slow["sections"]["Options"] == {"-h, --help": "Show this message and exit."}
    assert fast == slow
    assert root_help.render() == typer_out  # and laid out alike, line for line


def test_the_parser_sees_a_changed_summary_or_a_missing_command(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    page = root_help.render()
    assert parse_page(page.replace("List the recipes", "List recipes")) != parse_page(page)
    dropped = "\n".join(line for line in page.splitlines() if not line.startswith("  pins ")) + "\n"
    assert set(parse_page(dropped)["sections"]["Commands"]) == set(parse_page(page)["sections"]["Commands"]) - {"pins"}


@pytest.mark.parametrize("columns", ["", "0", "abc", "77", "300"])
def test_the_terminal_width_is_shutils(monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    assert root_help.terminal_columns() == shutil.get_terminal_size().columns


def test_bare_recipe_prints_the_page_on_stderr_with_exit_2_as_typer_does(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    code, out, err = typer_page([])
    assert (code, out) == (2, "")
    fast_err = io.StringIO()
    with contextlib.redirect_stderr(fast_err), contextlib.redirect_stdout(io.StringIO()) as fast_out:
        assert root_help.answer([]) == 2
    assert fast_out.getvalue() == "" and fast_err.getvalue() == err


@pytest.mark.parametrize("args", [["list"], ["--help", "list"], ["-h", "-h"], ["nonexistent"], ["--version"]])
def test_other_command_lines_go_to_typer(args):
    assert root_help.answer(args) is None


RUNNER = (
    "import json, sys\n"
    "from recipekit.cli.main import main\n"
    "code = main(json.loads(sys.argv[1]))\n"
    "sys.stdout.flush()\n"
    "print(json.dumps({'code': code, 'heavy': sorted(m for m in sys.modules "
    "if m.split('.')[0] in ('typer', 'click', 'rich'))}), file=sys.stderr)\n"
)


@pytest.mark.parametrize("args,code", [(["--help"], 0), (["-h"], 0), ([], 2)])
def test_the_root_help_imports_no_typer_click_or_rich(args, code):
    r = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "100"},
    )
    result = json.loads(r.stderr.strip().splitlines()[-1])
    assert result == {"code": code, "heavy": []}, r.stderr
    assert "Commands:\n  version " in (r.stdout if code == 0 else r.stderr)


def test_a_command_still_loads_typer():
    """The runner above can see typer when it is loaded (so its empty list means something)."""
    r = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(["version"])], capture_output=True, text=True, timeout=60
    )
    result = json.loads(r.stderr.strip().splitlines()[-1])
    assert result["code"] == 0 and "typer" in result["heavy"], r.stderr


def test_the_console_script_help_imports_no_typer():
    script = Path(sys.executable).with_name("recipe")
    if not script.is_file():
        pytest.skip("no `recipe` console script beside this python")
    r = subprocess.run(
        [sys.executable, "-X", "importtime", str(script), "--help"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0 and r.stdout.startswith("Usage: recipe [OPTIONS] COMMAND [ARGS]...\n")
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "recipekit.cli.root_help" in imported  # the listing is read
    assert not {m for m in imported if m.split(".")[0] in ("typer", "click", "rich")}, sorted(imported)


def test_an_unknown_command_errors_in_one_line_with_the_commands(run_cli):
    code, out, err = run_cli("nonexistent")
    assert code == 2 and out == ""
    assert err.startswith("error[unknown-command] `recipe` has no command 'nonexistent' (hint: commands: ")
    assert "render" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args,closed,code", [("--help", 1, 0), ("", 2, 2)])
def test_a_closed_stream_gets_no_traceback(args, closed, code):
    """As with typer's echo: nothing printed, the same exit code, nothing on the other stream."""
    runner = "import sys\nfrom recipekit.cli.main import main\nmain()\n"
    script = f"exec {closed}>&-; exec {shlex.quote(sys.executable)} -c {shlex.quote(runner)} {args}"
    r = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == code
    assert (r.stderr if closed == 1 else r.stdout) == ""
