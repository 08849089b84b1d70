"""recipe upgrade's pieces on planted data: the ast catalog (both cli_args homes, the enable/disable
pairing), a planted rename rewritten in the variant, a removed flag dropped or blocked, and the
Range reader (206 and a server that refuses Range)."""

from __future__ import annotations

import http.server
import io
import random
import threading
import zipfile
from pathlib import Path

import pytest

from recipekit.errors import RecipekitError
from recipekit.tools.upgrade import wheel_source
from recipekit.tools.upgrade.names import KEPT, REMOVED, RENAMED, Use, classify
from recipekit.tools.upgrade.remote_zip import RemoteFile
from recipekit.tools.upgrade.variant import propose
from recipekit.tools.upgrade.wheel_catalog import Catalog, build_catalog
from tests.ports import free_port

CONFIG = """
from typing import Literal
Backend = Literal["mp", "uni"]
class ParallelConfig:
    tensor_parallel_size: int = 1
    backend: Backend = "mp"
    enable_foo: bool = False
    eager: bool = True
"""
ARG_UTILS = """
import argparse
class EngineArgs:
    @staticmethod
    def add_cli_args(parser):
        p_kwargs = get_kwargs(ParallelConfig)
        g = parser.add_argument_group("p")
        g.add_argument("--tensor-parallel-size", "-tp", **p_kwargs["tensor_parallel_size"])
        g.add_argument("--backend", **p_kwargs["backend"])
        g.add_argument("--enable-foo", **{**p_kwargs["enable_foo"], "default": None})
        g.add_argument("--eager", **p_kwargs["eager"])
        g.add_argument("--old-thing", type=int, deprecated=True)
        return parser
"""
CLI_ARGS = """
class FrontendArgs:
    port: int = 8000
    enable_bar: bool = False
    @classmethod
    def add_cli_args(cls, parser):
        frontend_kwargs = get_kwargs(cls)
        for key, value in frontend_kwargs.items():
            parser.add_argument(f"--{key.replace('_', '-')}", **value)
        return parser
def make_arg_parser(parser):
    parser.add_argument("--headless", action="store_true")
    return parser
"""
ENVS = 'environment_variables: dict = {"VLLM_A": lambda: 1, "VLLM_B": lambda: 2}\n'
PAIRS = 'class EnableDisableAction:\n    _inverse_prefixes = {"--enable-": "--disable-", "--disable-": "--enable-"}\n'


def sources(cli_path: str, pairs: bool) -> dict[str, str]:
    s = {
        "vllm/config/parallel.py": CONFIG,
        "vllm/engine/arg_utils.py": ARG_UTILS,
        cli_path: CLI_ARGS,
        "vllm/envs.py": ENVS,
    }
    if pairs:
        s["vllm/utils/argparse_utils.py"] = PAIRS
    return s


def test_catalog_0_32_layout_has_negations():
    c = build_catalog("0.32.0", sources("vllm/entrypoints/launchers/cli_args.py", pairs=False))
    assert c.cli_args_module == "vllm.entrypoints.launchers.cli_args"
    assert set(c.flags) == {
        "--tensor-parallel-size", "-tp", "--backend", "--enable-foo", "--no-enable-foo", "--eager",
        "--no-eager", "--old-thing", "--port", "--enable-bar", "--no-enable-bar", "--headless",
    }  # fmt: skip
    assert c.flags["--backend"]["choices"] == ["mp", "uni"]
    assert c.flags["--old-thing"]["deprecated"] is True
    assert c.flags["--enable-foo"]["takes_value"] is False and c.flags["--port"]["takes_value"] is True
    assert c.env == ["VLLM_A", "VLLM_B"] and c.renames == {}


def test_catalog_0_33_layout_pairs_enable_disable():
    c = build_catalog("0.33.0", sources("vllm/entrypoints/common/cli_args.py", pairs=True))
    assert c.cli_args_module == "vllm.entrypoints.common.cli_args"
    assert "--no-enable-foo" not in c.flags and "--disable-foo" in c.flags
    assert c.renames["--no-enable-foo"][0] == "--disable-foo"
    assert c.renames["--no-enable-bar"][0] == "--disable-bar"
    assert "--no-eager" in c.flags  # not an enable/disable name: its negation stays


def test_catalog_without_parser_module_is_an_error():
    s = sources("vllm/entrypoints/common/cli_args.py", pairs=True)
    del s["vllm/entrypoints/common/cli_args.py"]
    with pytest.raises(ValueError, match="cli_args"):
        build_catalog("x", s)


RECIPE = """engine:
  name: vllm
  version: 0.32.0
serve:
  args:
    - {flag: --no-enable-foo}
    - {flag: --gone-flag, value: 3}
    - flag: --gone-multi
      value: 4
    - {flag: --port, value: 8000}
"""


def _pair() -> tuple[Catalog, Catalog]:
    old = Catalog("0.32.0", "m", {f: {"choices": None, "default": None} for f in ("--no-enable-foo", "--gone-flag", "--gone-multi", "--port")}, ["VLLM_A"])  # fmt: skip
    new = Catalog("0.33.0", "m", {"--port": {"choices": None, "default": None}, "--disable-foo": {}}, ["VLLM_A"])
    return old, new


def test_planted_rename_is_rewritten_and_removed_is_dropped_or_blocked():
    old, new = _pair()
    uses = [Use("flag", f, f"$.serve.args[{i}]") for i, f in enumerate(["--no-enable-foo", "--gone-flag", "--gone-multi", "--port"])]  # fmt: skip
    findings = classify(uses, old, new, extra_renames={"--no-enable-foo": ("--disable-foo", "planted pair")})
    by = {f.name: f for f in findings}
    assert by["--no-enable-foo"].status == RENAMED and by["--no-enable-foo"].replacement == "--disable-foo"
    assert by["--gone-flag"].status == REMOVED and by["--port"].status == KEPT
    v = propose(RECIPE, findings, ("0.32.0", "0.33.0"))
    assert "- {flag: --disable-foo}" in v.text and "--no-enable-foo" not in v.text
    assert "--gone-flag" not in v.text and "version: 0.33.0" in v.text
    assert "--gone-multi" in v.text and any("--gone-multi" in b for b in v.blocked)
    assert "-    - {flag: --gone-flag, value: 3}" in v.diff(RECIPE, "a", "b")


def test_without_a_rename_source_a_missing_flag_is_removed_not_guessed():
    old, new = _pair()
    [f] = classify([Use("flag", "--no-enable-foo", "$")], old, new)
    assert f.status == REMOVED and f.replacement is None


def _zip_bytes() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("big.bin", random.Random(0).randbytes(1 << 20))  # 1 MiB the reader must not fetch
        z.writestr("vllm/envs.py", ENVS)
    return buf.getvalue()


def _serve(body: bytes, ranges: bool):
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            rng = self.headers.get("Range")
            if ranges and rng:
                a, b = (int(x) for x in rng.split("=")[1].split("-"))
                b = min(b, len(body) - 1)
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {a}-{b}/{len(body)}")
                self.send_header("Content-Length", str(b - a + 1))
                self.end_headers()
                self.wfile.write(body[a : b + 1])
            else:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.mark.parametrize("ranges", [True, False])
def test_remote_zip_reads_members_with_range_or_whole(ranges: bool):
    body = _zip_bytes()
    srv = _serve(body, ranges)
    try:
        f = RemoteFile(f"http://127.0.0.1:{srv.server_address[1]}/w.whl")
        with zipfile.ZipFile(f) as z:
            assert z.read("vllm/envs.py").decode() == ENVS
        assert f.size == len(body)
        assert f.range_refused is (not ranges)
        if ranges:
            assert f.downloaded < len(body) // 2  # the 2 MiB member was never fetched
        else:
            assert f.downloaded == len(body)
    finally:
        srv.shutdown()
        srv.server_close()


def test_wheel_sources_are_cached_and_extended_per_member(tmp_path: Path, monkeypatch):
    body = _zip_bytes()
    srv = _serve(body, ranges=True)
    url = f"http://127.0.0.1:{srv.server_address[1]}/w.whl"
    monkeypatch.setattr(wheel_source, "resolve_wheel", lambda p, v: (url, "ab" * 32))
    try:
        first = wheel_source.read_wheel("vllm", "9.9", lambda n: n == "vllm/envs.py", tmp_path)
        assert not first.cached and first.files == {"vllm/envs.py": ENVS} and 0 < first.downloaded_bytes < len(body)
        again = wheel_source.read_wheel("vllm", "9.9", lambda n: n == "vllm/envs.py", tmp_path)
        assert again.cached and again.downloaded_bytes == 0 and again.files == first.files
        assert again.names == ["big.bin", "vllm/envs.py"]
        # asking for one more member reads just it and keeps the cached one
        more = wheel_source.read_wheel("vllm", "9.9", lambda n: True, tmp_path)
        assert not more.cached and set(more.files) == {"vllm/envs.py"}  # big.bin is not UTF-8: skipped
        assert wheel_source.read_wheel("vllm", "9.9", lambda n: True, tmp_path).cached
    finally:
        srv.shutdown()
        srv.server_close()


def test_sources_from_a_checkout_folder(tmp_path: Path):
    for rel, text in sources("vllm/entrypoints/common/cli_args.py", pairs=True).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "vllm/unrelated.py").write_text("x = 1\n")
    src = wheel_source.read_tree(tmp_path, "vllm", "0.33.0", lambda n: n != "vllm/unrelated.py")
    assert "vllm/unrelated.py" in src.names and "vllm/unrelated.py" not in src.files
    assert len(src.sha256) == 64 and src.url.startswith("file:")
    assert build_catalog("0.33.0", src.files).renames["--no-enable-foo"][0] == "--disable-foo"
    (tmp_path / "vllm/envs.py").write_text(ENVS + "# changed\n")
    assert wheel_source.read_tree(tmp_path, "vllm", "0.33.0", lambda n: True).sha256 != src.sha256
    with pytest.raises(RecipekitError, match="no vllm/ package folder"):
        wheel_source.read_tree(tmp_path / "nothing", "vllm", "0.33.0", lambda n: True)
