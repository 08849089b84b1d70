"""The oracle refuses what it cannot compute: non-finite checkpoints (naming the first layer/component,
writing nothing), configs that disagree with the tensors (before any compute), bad options, missing
torch/CUDA, and references `paired` cannot pair; each a specific error code, never internal-error."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from recipekit.bench.gates.perplexity import ppl_text
from recipekit.bench.oracle.run import run_oracle, tokenize_text, write_reference
from recipekit.bench.oracle.tiny import _rewrite, make_oracle_tiny
from recipekit.checkpoint.safetensors_io import Checkpoint

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def tamed(tmp_path_factory):
    return make_oracle_tiny(tmp_path_factory.mktemp("oracle-ok") / "orig")


@pytest.fixture(scope="module")
def good_ref(tamed, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "ref.json"
    write_reference(run_oracle(tamed, [tokenize_text(tamed, ppl_text(), 12)], threads=1), out)
    return out


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _run(run_cli, ckpt: Path, out: Path, *extra: str) -> tuple[int, str]:
    code, _, err = run_cli("oracle", "run", "-c", str(ckpt), "--tokens", "12", "--out", str(out), *extra)
    return code, err


def _one_error(err: str, code: str) -> str:
    lines = [x for x in err.splitlines() if x.startswith("error[")]
    assert lines and lines[-1].startswith(f"error[{code}]"), err
    assert "Traceback" not in err and "internal-error" not in err
    return lines[-1]


def test_a_default_make_tiny_checkpoint_is_refused_naming_where_and_writes_nothing(run_cli, tmp_path):
    from recipekit.checkpoint.tiny_dsv41 import make_tiny_dsv41

    raw = make_tiny_dsv41(tmp_path / "raw", seed=0, size="tiny").path
    out = tmp_path / "ref.json"
    code, err = _run(run_cli, Path(raw), out)
    line = _one_error(err, "oracle-non-finite")
    assert code == 1 and "layer 0 " in line and "non-finite value(s)" in line and "no reference was written" in line
    assert not out.exists()


def test_a_bf16_inf_in_the_embedding_is_refused_and_the_prior_file_kept(run_cli, tamed, tmp_path):
    ck = _copy(tamed, tmp_path / "inf")
    with Checkpoint(ck) as c:
        f = c.tensor_file("embed.weight")
        _rewrite(f, "embed.weight", b"\x80\x7f" * (f.info("embed.weight").nbytes // 2))  # bf16 +inf
    out = tmp_path / "ref.json"
    out.write_text("prior\n")
    code, err = _run(run_cli, ck, out)
    line = _one_error(err, "oracle-non-finite")
    assert code == 1 and "the embedding (embed.weight rows)" in line
    assert out.read_text() == "prior\n"


@pytest.mark.parametrize("key,value", [("hidden_size", 96), ("vocab_size", 10**12)])
def test_a_config_that_disagrees_with_the_tensors_is_refused_before_compute(run_cli, tamed, tmp_path, key, value):
    ck = _copy(tamed, tmp_path / "cfg")
    cfg = json.loads((ck / "config.json").read_text())
    text = cfg.get("text_config", cfg)
    text[key] = value
    (ck / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "ref.json"
    code, err = _run(run_cli, ck, out, "--prompts", str(_prompts(tmp_path, [[0, 1, 2, 3]])))
    assert code == 2 and not out.exists()
    line = _one_error(err, "oracle-config-mismatch")
    assert "embed.weight has shape" in line


def _prompts(tmp_path: Path, ids: list[list[int]]) -> Path:
    p = tmp_path / "prompts.json"
    p.write_text(json.dumps({"prompts": ids}))
    return p


@pytest.mark.parametrize(
    "extra,code,words",
    [
        (("--tokens", "1"), "oracle-bad-option", "--tokens 1"),
        (("--threads", "-1"), "oracle-bad-option", "--threads -1"),
        (("--device", "cuda"), "oracle-cuda-missing", "--device cuda"),
    ],
)
def test_bad_options_get_their_codes(run_cli, tamed, tmp_path, extra, code, words):
    import torch

    if code == "oracle-cuda-missing" and torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    out = tmp_path / "ref.json"
    rc, _, err = run_cli("oracle", "run", "-c", str(tamed), "--out", str(out), *extra)
    line = _one_error(err, code)
    assert rc in (2, 6) and words in line and "(hint: " in line and not out.exists()


def test_missing_torch_gives_the_install_hint(run_cli, tamed, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    rc, _, err = run_cli("oracle", "run", "-c", str(tamed), "--out", str(tmp_path / "r.json"))
    line = _one_error(err, "oracle-torch-missing")
    assert rc == 6 and "pip install" in line


def _mutated(good_ref: Path, tmp_path: Path, name: str, change) -> Path:
    doc = json.loads(good_ref.read_text())
    change(doc)
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(doc))
    return p


def _set(path: str, value):
    def change(doc):
        cur = doc
        keys = path.split(".")
        for k in keys[:-1]:
            cur = cur[int(k)] if k.isdigit() else cur[k]
        last = keys[-1]
        cur[int(last) if last.isdigit() else last] = value

    return change


@pytest.mark.parametrize(
    "name,change,words",
    [
        ("results-list", _set("results", [1, 2]), "$.results[0]"),
        ("results-dict", _set("results", {"a": 1}), "$.results"),
        ("results-strings", _set("results", ["x", "y"]), "$.results[0]"),
        ("nan", _set("results.0.logprobs.3", float("nan")), "$.results[0].logprobs[3]"),
        ("positive", _set("results.0.logprobs.3", 5.0), "> 0"),
        ("declared-tokens", _set("prompt_set.tokens", 1536), "prompt_set.tokens says 1536"),
        ("logprob-string", _set("results.0.logprobs.0", "-1"), "$.results[0].logprobs[0]"),
    ],
)
def test_paired_refuses_what_capture_would_refuse(run_cli, good_ref, tmp_path, name, change, words):
    bad = _mutated(good_ref, tmp_path, name, change)
    rc, out, err = run_cli("oracle", "paired", str(good_ref), str(bad))
    line = _one_error(err, "oracle-reference-invalid")
    assert rc == 2 and words in line and out == "", (line, out)


def test_paired_on_two_tokens_is_its_own_error(run_cli, tamed, tmp_path):
    ref = tmp_path / "two.json"
    write_reference(run_oracle(tamed, [[0, 5]], threads=1), ref)
    rc, _, err = run_cli("oracle", "paired", str(ref), str(ref))
    assert rc == 2 and "at least 2 scored tokens" in _one_error(err, "paired-too-few-tokens")


def test_capture_with_every_logprob_at_minus_800_is_refused(tmp_path):
    from recipekit.bench.oracle.reference import summary_figures
    from recipekit.errors import RecipekitError

    with pytest.raises(RecipekitError) as e:
        summary_figures([([0, 1, 2], [-800.0, -800.0])])
    assert e.value.code == "oracle-ppl-overflow" and "800" in e.value.message


@pytest.mark.parametrize(
    "mode,text,tokens,code,rc",
    [
        ("honest", "x", "5", "oracle-capture-short-text", 2),  # /tokenize gives 1 token
        ("logprobs-minus-800", None, "16", "oracle-ppl-overflow", 1),
        ("tokenize-disagree", None, "16", "oracle-capture-tokenizer-disagrees", 1),
        ("health-only", None, "16", "oracle-capture-tokenize-failed", 1),
    ],
)
def test_capture_cli_refuses_with_its_code_and_writes_nothing(run_cli, tmp_path, mode, text, tokens, code, rc):
    from tests.lying_server import LyingServer

    out = tmp_path / "ref.json"
    out.write_text("prior\n")
    args = ["oracle", "capture", "--out", str(out), "--tokens", tokens, "--timeout", "10"]
    if text is not None:
        (tmp_path / "t.txt").write_text(text)
        args += ["--text", str(tmp_path / "t.txt")]
    with LyingServer(mode) as s:
        got_rc, _, err = run_cli(*args, "--url", s.url)
    line = _one_error(err, code)
    assert got_rc == rc and "(hint: " in line
    assert out.read_text() == "prior\n"
