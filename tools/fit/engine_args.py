"""The serve flags and env that size vLLM's memory, read from the argv and env the launch will pass
(the same words `recipe render` shows): the planner judges what will run, not a second description of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from recipekit.errors import ExitCode, RecipekitError

_VALUED = {
    "--max-model-len": "max_model_len",
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--tensor-parallel-size": "tp",
    "-tp": "tp",
    "--pipeline-parallel-size": "pp",
    "-pp": "pp",
    "--data-parallel-size": "dp",
    "-dp": "dp",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--max-num-seqs": "max_num_seqs",
    "--num-gpu-blocks-override": "num_gpu_blocks_override",
    "--kv-cache-memory-bytes": "kv_cache_memory_bytes",
    "--block-size": "block_size",
}
_SWITCHES = {"--enable-expert-parallel": "expert_parallel", "--async-scheduling": "async_scheduling"}


@dataclass
class EngineMemoryArgs:
    max_model_len: Optional[int] = None
    gpu_memory_utilization: float = 0.9  # vLLM's default (config/cache.py)
    kv_cache_dtype: str = "auto"
    tp: int = 1
    pp: int = 1
    dp: int = 1
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    num_gpu_blocks_override: Optional[int] = None
    kv_cache_memory_bytes: Optional[int] = None
    block_size: Optional[int] = None
    expert_parallel: bool = False
    async_scheduling: bool = False
    cpu_kvcache_space_gib: Optional[float] = None
    pp_partition: Optional[str] = None


def _size(text: str) -> int:
    """vLLM's human sizes for --kv-cache-memory-bytes (e.g. 12G, 512M, 1e9)."""
    units = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}
    t = text.strip().lower().rstrip("b")
    for u in sorted(units, key=len, reverse=True):
        if t.endswith(u):
            return int(float(t[: -len(u)]) * units[u])
    return int(float(t))


def parse(argv: list[str], env: dict[str, Optional[str]]) -> EngineMemoryArgs:
    out = EngineMemoryArgs()
    i = 0
    while i < len(argv):
        word = argv[i]
        flag, eq, inline = word.partition("=")
        if flag in _SWITCHES:
            setattr(out, _SWITCHES[flag], True)
        elif flag in _VALUED:
            value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            i += 0 if eq else 1
            field = _VALUED[flag]
            try:
                if field == "kv_cache_dtype":
                    setattr(out, field, value)
                elif field == "gpu_memory_utilization":
                    setattr(out, field, float(value))
                elif field == "kv_cache_memory_bytes":
                    setattr(out, field, _size(value))
                else:
                    setattr(out, field, int(value))
            except ValueError:
                raise RecipekitError(
                    code="fit-bad-engine-arg",
                    exit_code=ExitCode.INVALID_INPUT,
                    message=f"{flag} {value!r} is not a number the planner can use",
                    hint="fix the value in the recipe or the --set that gives it",
                ) from None
        i += 1
    space = env.get("VLLM_CPU_KVCACHE_SPACE")
    if space:
        # vLLM reads it as a whole number of GiB (vllm0.32 envs.py:887-888 int(os.getenv(...))):
        # "0.25" stops the engine at start-up, so the planner refuses it too
        try:
            out.cpu_kvcache_space_gib = float(int(space))
        except ValueError:
            raise RecipekitError(
                code="fit-bad-engine-arg",
                exit_code=ExitCode.INVALID_INPUT,
                message=f"VLLM_CPU_KVCACHE_SPACE {space!r} is not a whole number of GiB (vLLM reads it with int())",
                hint="set it to a whole number, e.g. 1",
            ) from None
    out.pp_partition = env.get("VLLM_PP_LAYER_PARTITION") or None
    return out
