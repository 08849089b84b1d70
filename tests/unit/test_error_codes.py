"""The error registry (recipekit/error_codes.py) and the source agree: every code the source
raises is a row, with the exit code its raises name; no row is left unraised; README's table is
the registry's; a raise without a hint shows the row's default hint."""

from __future__ import annotations

from pathlib import Path

from recipekit.error_codes import CODES, Code, ExitCode, lookup
from recipekit.errors import RecipekitError
from recipekit.tools import error_scan

ROOT = Path(__file__).resolve().parents[2]


def test_every_raised_code_is_registered_with_its_exit_code():
    raised = error_scan.scan()
    assert len({r.code for r in raised}) > 300  # the scan sees the tree (not an empty walk)
    found = error_scan.problems(raised, CODES)
    assert found == [], f"{len(found)} problem(s) between the raises and the registry:\n" + "\n".join(found)


def test_the_check_fails_on_planted_violations(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text('[tool.setuptools]\npackage-dir = { "recipekit" = "recipekit" }\n')
    pkg = tmp_path / "recipekit"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text(
        "from recipekit.errors import ExitCode, RecipekitError\n"
        "def _fail(code, message):\n"
        "    return RecipekitError(code=code, message=message)\n"
        "def f(x):\n"
        "    if x:\n"
        '        raise RecipekitError(code="brand-new-code", message="m", exit_code=ExitCode.NOT_FOUND)\n'
        '    raise RecipekitError(code="not-a-file", message="m", exit_code=ExitCode.GATE_FAILED)\n'
        "def g():\n"
        '    raise _fail("helper-code", "m")\n'
        "def h(i):\n"
        '    raise RecipekitError(code=f"family-{i}-x", message="m")\n'
        "def k():\n"
        '    raise RecipekitError(code="Bad_Code", message="m")\n'
    )
    raised = error_scan.scan(tmp_path)
    assert {r.code for r in raised} == {"brand-new-code", "not-a-file", "helper-code", "family-*-x", "Bad_Code"}
    registry = {
        "not-a-file": Code(ExitCode.INVALID_INPUT, ""),
        "family-*-x": Code(ExitCode.INVALID_INPUT, ""),
        "stale-code": Code(ExitCode.FAILURE, ""),
    }
    found = error_scan.problems(raised, registry)
    assert (
        "recipekit/m.py:6: code 'brand-new-code' is not registered: add the line "
        '`    "brand-new-code": Code(NOT_FOUND, ""),` to CODES in recipekit/error_codes.py (sorted by code)'
    ) in found
    assert any(
        p.startswith("recipekit/m.py:7: code 'not-a-file' is raised with ExitCode.GATE_FAILED")
        and "says INVALID_INPUT" in p
        for p in found
    ), found
    assert any(p.startswith("recipekit/m.py:9: code 'helper-code' is not registered") for p in found), found
    assert any("'Bad_Code' is not kebab-case" in p for p in found), found
    assert "recipekit/error_codes.py: code 'stale-code' is raised nowhere: remove its line from CODES" in found
    assert not any("family-*-x" in p for p in found)
    assert len(found) == 5


def test_the_registry_is_sorted_kebab_case_data():
    assert list(CODES) == sorted(CODES)
    for code, row in CODES.items():
        assert error_scan.KEBAB.fullmatch(code.replace("*", "x")), code
        assert isinstance(row.exit_code, ExitCode) and row.exit_code != ExitCode.OK
        assert row.hint == row.hint.strip()


def test_a_family_matches_its_data_and_nothing_else():
    assert lookup("constraint-gaudi-no-async") == CODES["constraint-*"]
    assert lookup("patch-anything-corrupt") == CODES["patch-*-corrupt"]
    assert lookup("patch-journal") is None
    assert lookup("no-such-code-anywhere") is None


def test_a_raise_without_a_hint_shows_the_default_hint():
    code = next(c for c, row in sorted(CODES.items()) if row.hint and "*" not in c)
    e = RecipekitError(code=code, message="m")
    assert e.hint == CODES[code].hint and f"(hint: {CODES[code].hint})" in str(e)
    assert RecipekitError(code=code, message="m", hint="mine").hint == "mine"
    assert RecipekitError(code="no-such-code-anywhere", message="m").hint is None


def test_the_readme_table_is_the_registry():
    text = (ROOT / "README.md").read_text()
    assert error_scan.BEGIN in text, (
        "README.md has no error-code table: run python -m recipekit.tools.error_scan --write README.md"
    )
    block = error_scan.BEGIN + text.split(error_scan.BEGIN, 1)[1].split(error_scan.END, 1)[0] + error_scan.END
    assert block == error_scan.readme_block(), (
        "README's error-code table is stale: run `python -m recipekit.tools.error_scan --write README.md`"
    )
