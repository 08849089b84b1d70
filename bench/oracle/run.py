"""A prompt set -> a reference file: the oracle's per-token log-probs with everything that made them.

The reference file (JSON, format REFERENCE_FORMAT) records: the prompts' token ids and per-token
log-probs, the checkpoint's hashes (reader.fingerprint), the prompt set's sha256 (over the ids),
the numerics options, torch version, device and threads, the run's tokens/s, peak RSS and bytes
read, and what is out of scope. Written atomically. `load_reference` checks the format and hash.
"""

from __future__ import annotations

import json
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from recipekit.atomic import atomic_write_text
from recipekit.bench.oracle.numerics import Numerics
from recipekit.bench.oracle.reference import REFERENCE_FORMAT, check, prompt_set_sha256, summary_figures
from recipekit.bounded import read_json
from recipekit.checkpoint import dsv41
from recipekit.errors import ExitCode, RecipekitError

# the largest files read (bounded reads: a FIFO, /dev/zero or a huge file is refused, not read)
PROMPTS_LIMIT = 256 * 2**20
REFERENCE_LIMIT = 512 * 2**20
TOKENIZER_CONFIG_LIMIT = 16 * 2**20


TORCH_HINT = "pip install 'recipekit[oracle]' (CPU wheel: pip install torch==2.13.0)"


def require_torch(device: str = "cpu") -> None:
    """torch importable, and CUDA present when `device` asks for it; else one clear error with the install hint."""
    try:
        import torch  # lazy: optional dependency, pulls numpy, torch
    except ImportError as e:
        raise RecipekitError(
            code="oracle-torch-missing",
            exit_code=ExitCode.NOT_FOUND,
            message=f"the oracle needs torch ({e})",
            hint=TORCH_HINT,
        ) from None
    if str(device).startswith("cuda"):
        index = int(device.split(":", 1)[1]) if device.startswith("cuda:") and device[5:].isdigit() else 0
        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            raise RecipekitError(
                code="oracle-cuda-missing",
                exit_code=ExitCode.NOT_FOUND,
                message=f"--device {device}: torch {torch.__version__} sees "
                f"{torch.cuda.device_count() if torch.cuda.is_available() else 0} CUDA device(s)",
                hint="use --device cpu, or install a CUDA build of torch on a host with an NVIDIA GPU "
                "(pip install torch --index-url https://download.pytorch.org/whl/cu128)",
            )


def tokenize_text(folder: str | Path, text: str, tokens: int) -> list[int]:
    """The checkpoint's own tokenizer (tokenizer.json), BOS first when tokenizer_config says so, cut to `tokens`."""
    from tokenizers import Tokenizer  # lazy: pulls tokenizers

    folder = Path(folder)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    ids = tok.encode(text, add_special_tokens=False).ids
    cfg_path = folder / "tokenizer_config.json"
    cfg = (
        read_json(cfg_path, "tokenizer config", TOKENIZER_CONFIG_LIMIT, code="oracle-tokenizer-invalid")
        if cfg_path.is_file()
        else {}
    )
    if not isinstance(cfg, dict):
        raise RecipekitError(
            code="oracle-tokenizer-invalid", location=str(cfg_path), message="tokenizer_config.json is not an object"
        )
    if cfg.get("add_bos_token", True):
        bos = dsv41.load_config(folder).get("bos_token_id", 0)
        ids = [int(bos)] + ids
    return ids[:tokens]


def load_prompts(path: str | Path) -> list[list[int]]:
    """A prompt-set file: {"prompts": [[ids...], ...]} (or a bare list of lists)."""
    p = Path(path)
    doc = read_json(
        p, "prompt set", PROMPTS_LIMIT, code="oracle-prompts-invalid", missing_code="oracle-prompts-not-found"
    )
    prompts = doc.get("prompts") if isinstance(doc, dict) else doc
    if (
        not isinstance(prompts, list)
        or not prompts
        or not all(isinstance(q, list) and len(q) >= 2 and all(type(t) is int and t >= 0 for t in q) for q in prompts)
    ):
        raise RecipekitError(
            code="oracle-prompts-invalid",
            location=str(p),
            message="prompts must be a non-empty list of token-id lists (2 or more ids each)",
            hint='{"prompts": [[0, 17, 42], ...]}',
            exit_code=ExitCode.INVALID_INPUT,
        )
    return prompts


def peak_rss_bytes() -> int:
    """The process's RSS high-water mark (VmHWM; since `reset_peak_rss` where the kernel allows it)."""
    status = _proc_status()
    if "VmHWM" in status:
        return status["VmHWM"]
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def current_rss_bytes() -> int:
    return _proc_status().get("VmRSS", 0)


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux: write 5 to /proc/self/clear_refs), so that the peak
    measured afterwards is the forward's own and not torch's import-time high-water mark."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _proc_status() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmHWM", "VmRSS"):
                    out[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


def run_oracle(
    folder: str | Path,
    prompts: list[list[int]],
    layout: str | None = None,
    device: str = "cpu",
    numerics: Any = None,
    threads: int | None = None,
    source: str = "prompts",
    progress: Callable[[str], None] | None = None,
    dtype: str = "float32",
    stream: bool | None = None,
    decoders: Any = None,
) -> dict[str, Any]:
    """Run the forward and return the reference document (not yet written). dtype "float64" computes
    the same model in double: a yardstick for fp32's own rounding (recorded as compute_dtype).
    `decoders` (bench/oracle/decoders.py; default the torch ops) decode the streamed weights on the
    device; the document's `decoders` says which ran: their name, or "numpy-codecs" when nothing was
    streamed (every weight through the per-tensor reader)."""
    import torch  # lazy: pulls torch

    from recipekit.bench.oracle.model import OUT_OF_SCOPE, Oracle, backend_flags  # lazy: pulls ml_dtypes, numpy
    from recipekit.bench.oracle.reader import open_reader  # lazy: pulls ml_dtypes, numpy

    if threads:
        torch.set_num_threads(int(threads))
    vocab_check = None
    with open_reader(folder, layout) as r:
        vocab_check = r.geom.vocab
        bad = [t for q in prompts for t in q if t >= vocab_check]
        if bad:
            raise RecipekitError(
                code="oracle-token-out-of-range",
                message=f"token id {bad[0]} is outside the vocabulary ({vocab_check})",
                hint="the prompt set was tokenized for another model",
                exit_code=ExitCode.INVALID_INPUT,
            )
        num = numerics or Numerics()
        hwm_reset = reset_peak_rss()
        baseline_rss = current_rss_bytes()  # torch imported, no weight read yet
        t0 = time.perf_counter()
        oracle = Oracle(r, num, device, progress, dtype, stream, decoders)
        rep = oracle.forward(prompts)
        wall = time.perf_counter() - t0
        cuda_peak = torch.cuda.max_memory_allocated() if str(device).startswith("cuda") else None
        fp = r.fingerprint()
        stats = r.stats

    figures = summary_figures([(q, res.logprobs) for q, res in zip(prompts, rep.results)])

    return {
        "format": REFERENCE_FORMAT,
        "oracle": "recipekit-dsv41-fp32",
        "model": "deepseek_v41 text prefill",
        "out_of_scope": OUT_OF_SCOPE,
        "checkpoint": {"path": str(folder), **fp},
        "prompt_set": {
            "source": source,
            "sha256": prompt_set_sha256(prompts),
            "prompts": len(prompts),
            "tokens": sum(len(q) for q in prompts),
        },
        "numerics": num.to_dict(),
        "torch": torch.__version__,
        "device": str(device),
        "compute_dtype": dtype,
        "decoders": _decoders_name(oracle.stream, decoders),
        "backend_flags": backend_flags(),
        "threads": torch.get_num_threads(),
        "measured": {
            "seconds": round(wall, 3),
            "tokens_per_s": round(rep.tokens / wall, 3) if wall else None,
            "peak_rss_bytes": peak_rss_bytes(),
            "baseline_rss_bytes": baseline_rss,
            "peak_rss_since": "forward start" if hwm_reset else "process start",
            "cuda_peak_bytes": cuda_peak,
            "bytes_read": stats.bytes_read,
            "bytes_read_by_kind": stats.by_kind,
            "experts_read": stats.experts_read,
            "engram_rows_read": stats.engram_rows_read,
        },
        **figures,
        "results": [
            {"ids": q, "logprobs": res.logprobs, "argmax": res.argmax, "nll": res.nll}
            for q, res in zip(prompts, rep.results)
        ],
    }


def _decoders_name(streamed: bool, decoders: Any) -> str:
    """Which decoders turned the layers' dense weights into fp32 (experts and Engram rows: the reader's
    numpy codecs either way)."""
    if not streamed:
        return "numpy-codecs"
    return str(decoders.name) if decoders is not None else "torch-ops"


def write_reference(doc: dict[str, Any], out: str | Path) -> Path:
    """Written atomically, and only a document the reading model accepts (never NaN, never a lying count)."""

    out = Path(out)
    check(json.loads(json.dumps(doc)), str(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(doc, indent=1) + "\n")
    return out


def load_reference(path: str | Path) -> dict[str, Any]:
    """Read a reference file through the one strict model (bench/oracle/reference.py)."""

    p = Path(path)
    try:
        doc = read_json(
            p,
            "reference file",
            REFERENCE_LIMIT,
            code="oracle-reference-invalid",
            missing_code="oracle-reference-missing",
        )
    except RecipekitError as e:
        if e.code != "oracle-reference-missing":
            raise
        raise RecipekitError(
            code=e.code,
            location=e.location,
            message=e.message,
            hint="make it with `recipe oracle run --checkpoint DIR --out FILE` or `recipe oracle capture`",
            exit_code=ExitCode.NOT_FOUND,
        ) from None
    check(doc, str(p))
    return doc
