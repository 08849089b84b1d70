"""`recipe show --effective` prints what it printed before the precedence became a list of layers
(recipekit/config.py LAYERS): golden outputs with a value from every layer (recipe, layout, .env,
process env, --set: a setting, an env knob, an extra env var, a serve flag added, one removed, an
ack), generated before that change and checked byte for byte (the recipe's content hash is masked,
so an edit of the recipe's text alone does not break them). RECIPEKIT_UPDATE_GOLDEN=1 rewrites."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from recipekit.catalog import load_recipe

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "effective"
CPU = "tiny-deepseek-cpu"
CMP = "deepseek-v4.1-flash-1017-cmp170hx-4x"

CASES = {
    "cpu-every-layer-human": (
        CPU,
        {"PORT": "9001", "HOST": ""},
        "PORT=8123\nVLLM_CPU_KVCACHE_SPACE=2\nSOME_EXTRA=abc\n",
        ["--set", "--max-num-seqs=4", "--set", "!--enforce-eager", "--set", "ack.x=1", "--set", "env.FOO=bar"],
    ),
    "cmp-env-layout-json": (CMP, {"LAYOUT": "tp4"}, "LAYOUT=pp4\nBIND=0.0.0.0\n", ["--set", "PORT=8444", "-f", "json"]),
    "cmp-default-human": (CMP, {}, None, []),
}


@pytest.mark.parametrize("name", list(CASES))
def test_show_effective_is_unchanged(name, tmp_path, monkeypatch, run_cli):
    ref, environ, dotenv, args = CASES[name]
    r = load_recipe(ref).recipe
    for key in list(r.settings) + [k.name for k in r.env] + ["LAYOUT"]:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("RECIPEKIT_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    if dotenv is not None:
        Path("x.env").write_text(dotenv)
        args = ["--env-file", "x.env", *args]
    code, out, err = run_cli("show", ref, "--effective", *args, env=environ)
    assert code == 0, err
    text = re.sub(r"sha256:[0-9a-f]{64}", "sha256:<content-hash>", out)
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("RECIPEKIT_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text()
