"""Files read from outside or from a state folder go through recipekit/bounded.py.

A FIFO blocks `read()` forever, `/dev/zero` never ends, a huge sparse file exhausts memory:
every recipe, .env, index, config, state file, cache, manifest, reference file or prompt set is
read with bounded.read_bytes / read_text / read_json (file type checked, read capped), or a
helper built on them (patches/fsio.read_file). Built from the source with `ast`: any
`Path.read_text()`, `Path.read_bytes()`, builtin `open()` for reading, `json.load()` or `yaml`
load outside the allow-list below fails, with the place and how to fix it. Each allowed place
says why a direct read is right there.
"""

from __future__ import annotations

import ast
from pathlib import Path

from recipekit.tools.import_graph import ROOT, module_files

_PKG = "package data shipped with recipekit (not from outside)"
_PROC = "a kernel file under /proc or /sys"
_STREAM = "streams a data file (weights, shards) in fixed chunks: memory stays bounded"
_OWN = "output of our own subprocess in a private temporary folder of this run"

# "path::function" -> why the direct read is right there
ALLOWED: dict[str, str] = {
    "backends/cpu/pydoc_model.py::card_line": "package data (the model card shipped beside the weights)",
    "backends/cpu/tinylm/corpus.py::_docstrings": "the standard library's own source files (the training corpus)",
    "backends/cpu/tinylm/prepare.py::main": "the corpus file the maintainer passes (a training script, not the apply path)",
    "backends/cpu/tinylm/train.py::main": "the prepared files the maintainer passes (a training script on the GPU host)",
    "backends/cpu/tinylm/sweep.py::main": "the files its own train.py runs just wrote (a standalone script on the GPU host)",
    "recipekit/bounded.py::*": "the bounded readers themselves",
    "recipekit/apply/lifecycle.py::logs": "follows the server log after checking it is a regular file",
    "recipekit/apply/runners/native.py::read_cmdline": _PROC,
    "recipekit/apply/runners/native.py::_stat_fields": _PROC,
    "hybrid/assemble.py::_write_counter": _PROC,
    "tools/error_scan.py::scan": "the toolkit's own source, read by a developer tool",
    "tools/error_scan.py::main": "the checkout's README, rewritten by a developer tool",
    "tools/import_graph.py::package_dirs": "the checkout's pyproject.toml, read by a developer tool",
    "tools/import_graph.py::imports_of": "the toolkit's own source, read by a developer tool",
    "recipekit/checkpoint/manifest.py::sha256_file": _STREAM,
    "recipekit/multinode/crd.py::extract_schema": "parses text handed in (the shipped CRD), reads no file",
    "recipekit/multinode/crd.py::lws_schema": _PKG,
    "recipekit/multinode/validate.py::validate_text": "parses text handed in (a manifest just rendered)",
    "recipekit/site/build.py::_static": _PKG,
    "backends/cpu/tiny_model.py::train_tokenizer": _PKG,
    "backends/gaudi/convert.py::_write_shard": _STREAM,
    "backends/gaudi/convert_bench.py::copy_tree_bytes": _STREAM,
    "backends/gaudi/port_quant.py::_load": _PKG,
    "backends/gaudi/validate.py::validate_gaudi": _STREAM,
    "tools/doctor/collect.py::_read": _PROC,
    "tools/fetch.py::_hash_file": _STREAM,
    "tools/fetch.py::_download": "appends to its own partial download (mode 'ab')",
    "tools/p2p/probe.py::_read_jsonl": _OWN,
    "tools/p2p/probe.py::probe_sha": _PKG,
    "tools/p2p/probe.py::boot_id": _PROC,
    "recipekit/checkpoint/tiny_dsv41.py::train_tokenizer": _PKG,
    "bench/gates/perplexity.py::ppl_text": _PKG,
    "bench/oracle/measure.py::_sequential": _STREAM,
    "bench/oracle/run.py::_proc_status": _PROC,
    "bench/oracle_hf.py::main": "reads the request its parent process writes to its stdin",
    "bench/protocol.py::load_prompt": _PKG,
    "bench/kernels/parity.py::thresholds": _PKG,
    "backends/cuda_sm80/kernels/tuning.py::table": _PKG,
    "bench/vllm_compare.py::run_vllm_bench": _OWN,
    "recipekit/checkpoint/engram_addressing.py::pinned_multipliers": _PKG,
    "hybrid/engram/placement.py::_sha256": _STREAM,
    "hybrid/engram/placement.py::_copy_resumable": _STREAM,
    "patches/catalogs/__init__.py::_read": _PKG,
    "patches/catalogs/__init__.py::available": _PKG,
    "patches/catalogs/generate.py::generate": "the maintainers' tool that regenerates the shipped catalogs",
}

_YAML_LOADS = {"load", "safe_load", "safe_load_all", "load_all", "full_load", "unsafe_load"}


def _kind(call: ast.Call) -> str | None:
    """What direct read `call` is, or None."""
    f = call.func
    if isinstance(f, ast.Attribute):
        if f.attr in ("read_text", "read_bytes") and not call.args:  # Path's; SafetensorsFile's take a name
            return f".{f.attr}()"
        if isinstance(f.value, ast.Name) and f.value.id == "json" and f.attr == "load":
            return "json.load()"
        if isinstance(f.value, ast.Name) and f.value.id == "yaml" and f.attr in _YAML_LOADS:
            return f"yaml.{f.attr}()"
    if isinstance(f, ast.Name) and f.id == "open":
        mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
        text = mode.value if isinstance(mode, ast.Constant) else ("r" if mode is None else "?")
        if not any(c in str(text) for c in "wax+"):  # writing (or updating) a file of its own
            return f"open(mode={text!r})"
    return None


def direct_reads(path: Path) -> list[tuple[int, str, str]]:
    """(line, enclosing function name, kind) of every direct read in the module at `path`."""
    out: list[tuple[int, str, str]] = []

    def visit(node: ast.AST, fn: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else fn
            if isinstance(child, ast.Call):
                k = _kind(child)
                if k:
                    out.append((child.lineno, fn or "<module>", k))
            visit(child, name)

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return out


def _all_reads() -> list[tuple[str, int, str, str]]:
    rows = []
    for path in sorted(set(module_files(ROOT).values())):
        rel = str(path.relative_to(ROOT))
        rows += [(rel, line, fn, kind) for line, fn, kind in direct_reads(path)]
    return rows


def test_files_from_outside_or_state_folders_are_read_bounded():
    bad = [
        f"{rel}:{line} {fn}: {kind}"
        for rel, line, fn, kind in _all_reads()
        if f"{rel}::{fn}" not in ALLOWED and f"{rel}::*" not in ALLOWED
    ]
    assert not bad, (
        "read these through recipekit/bounded.py (read_bytes/read_text/read_json: type checked, size capped), "
        "or add the place to ALLOWED with the reason a direct read is right:\n" + "\n".join(bad)
    )


def test_every_allowed_place_still_reads_directly():
    """An entry whose read went away is removed, so the list keeps meaning what it says."""
    seen = {f"{rel}::{fn}" for rel, _line, fn, _kind in _all_reads()}
    stale = [k for k in ALLOWED if not k.endswith("::*") and k not in seen]
    assert not stale, stale


def test_the_rule_finds_a_direct_read(tmp_path: Path):
    src = tmp_path / "m.py"
    src.write_text(
        "import json, yaml\n"
        "def a(p):\n    return json.loads(p.read_text())\n"
        "def b(p):\n    return yaml.safe_load(open(p))\n"
        "def c(p):\n    with open(p, 'wb') as f:\n        f.write(b'')\n"
        "def d(sf):\n    return sf.read_bytes('tensor', 0, 4)\n"
    )
    got = direct_reads(src)
    assert got == [(3, "a", ".read_text()"), (5, "b", "yaml.safe_load()"), (5, "b", "open(mode='r')")]
