"""The MiaAI decode protocol as the seeds use it, pinned: prompts, levels, repeats, figures.

- Prompt types structured / code / prose, stored in bench/prompts/ and pinned by sha256 here.
- Every request: greedy, forced length (min_tokens = max_tokens, ignore_eos), a unique nonce
  at the head of the prompt, and for N > 1 streams the suffix " (stream i/N)".
- 1 stream: median of 5 runs of the per-stream decode tok/s.
- 2/4/8 streams: median of 3 waves of the aggregate decode tok/s
  (total decode tokens / (latest last token − earliest first token)).
- Cold prefill: distinct filler of a given token length, max_tokens 1, median of N runs of
  prompt tokens / TTFT; the server's prefix-cache hit counter must not move.

Every figure is computed from the client's own counts (tokens counted on the stream, prompt
ids it sent), over the requests whose server `usage` agrees with them (`check_counts`); the
others are left out and counted in `left_out` with their reasons. Where the server has
/tokenize, each measured reply is re-tokenized too, and disagreements are reported
(`retokenized`). A run in which no request can be trusted fails (`bench-untrusted`).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import Any, Callable, Sequence

from recipekit.bench.client import (
    ANSWER_ERRORS,
    COUNT_TOLERANCE,
    Client,
    RequestRecord,
    check_counts,
    make_nonce,
    with_nonce,
)
from recipekit.bench.filler import filler
from recipekit.errors import ExitCode, RecipekitError, did_you_mean

PROTOCOL_VERSION = "miaai-decode/1"

PROMPT_SHA256 = {
    "structured": "47c436d90d1358ffa10b8f2df4e279b3ef3205a2a5a7f43881ac8305262a42b7",
    "code": "6c3d3002410334657e78272a2bb2d37acf9ae2ec9e10e888ad2a24840be59b9f",
    "prose": "68af63b865a069b8d8c491cff697e9c63d097207e6031506a1cbf22de7658956",
}
PROMPT_TYPES = tuple(PROMPT_SHA256)


def load_prompt(name: str) -> str:
    """The stored prompt text, refused if its bytes do not match the pinned sha256."""
    if name not in PROMPT_SHA256:
        raise RecipekitError(
            code="unknown-prompt-type",
            message=f"unknown prompt type {name!r}",
            hint=did_you_mean(name, PROMPT_SHA256) or f"one of {', '.join(PROMPT_TYPES)}",
        )
    data = resources.files("recipekit.bench").joinpath("prompts").joinpath(f"{name}.txt").read_bytes()
    got = hashlib.sha256(data).hexdigest()
    if got != PROMPT_SHA256[name]:
        raise RecipekitError(
            code="prompt-hash-mismatch",
            exit_code=ExitCode.DRIFT,
            location=f"bench/prompts/{name}.txt",
            message=f"sha256 {got[:12]}… differs from the pinned {PROMPT_SHA256[name][:12]}…",
            hint="the protocol's prompts are pinned; restore the file or bump PROTOCOL_VERSION",
        )
    return data.decode().strip()


@dataclass
class ProtocolConfig:
    prompt_types: list[str] = field(default_factory=lambda: list(PROMPT_TYPES))
    levels: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    max_tokens: int = 256
    single_runs: int = 5
    multi_runs: int = 3
    warmups: int = 2
    prefill_tokens: int = 4096
    prefill_runs: int = 9
    quick: bool = False

    @classmethod
    def quick_config(cls) -> "ProtocolConfig":
        return cls(
            levels=[1, 2],
            max_tokens=32,
            single_runs=2,
            multi_runs=1,
            warmups=1,
            prefill_tokens=512,
            prefill_runs=2,
            quick=True,
        )


def _median(xs: Sequence[float | None]) -> float | None:
    known = [x for x in xs if x is not None and math.isfinite(x)]
    return statistics.median(known) if known else None


def wave_stats(records: list[RequestRecord]) -> dict[str, Any]:
    """One wave of N concurrent streams: per-stream and aggregate figures (sparkDash style),
    from the trusted requests only (answered, and their usage agrees with the client's count)."""
    ok = [r for r in records if r.trusted and r.token_events]
    tps = [r.decode_tps for r in ok if r.decode_tps]
    ttft = [r.ttft for r in ok if r.ttft is not None]
    firsts = [r.t_first for r in ok if r.t_first is not None]
    lasts = [r.t_last for r in ok if r.t_last is not None]
    decode_tokens = sum(max(0, r.token_events - 1) for r in ok)
    span = (max(lasts) - min(firsts)) if firsts and lasts else 0.0
    wall = max(r.t_end for r in records) - min(r.t_start for r in records) if records else 0.0
    # tokens that reached the client in bursts (RequestRecord.burst): the server's output was
    # held back (an overloaded host, a buffering proxy) and decode speed is not measurable
    burst = sum(1 for r in ok if r.burst)
    if burst:  # the decode window of the wave is not observable either
        span = 0.0
    return {
        "streams_ok": len(ok),
        "streams_failed": sum(1 for r in records if not r.ok),
        "streams_left_out": sum(1 for r in records if r.ok and r not in ok),
        "streams_burst": burst,
        "errors": [r.error for r in records if r.error],
        "left_out": [r.left_out for r in records if r.left_out],
        "finish_reasons": sorted({str(r.finish_reason) for r in ok}),
        "completion_tokens": [r.token_events for r in ok],
        "stream_decode_tps": tps,
        "median_stream_decode_tps": _median(tps),
        "min_stream_decode_tps": min(tps) if tps else None,
        "max_stream_decode_tps": max(tps) if tps else None,
        "ttft_s": ttft,
        "aggregate_decode_tps": decode_tokens / span if span > 0 else None,
        "aggregate_wall_tps": sum(r.token_events for r in ok) / wall if wall > 0 else None,
        "requests": [r.summary() for r in records],
    }


def level_summary(prompt_type: str, streams: int, waves: list[dict]) -> dict:
    """The protocol's figure for a level: c1 median of per-stream runs, cN median of aggregates."""
    per_stream = _median([w["median_stream_decode_tps"] for w in waves])
    aggregate = _median([w["aggregate_decode_tps"] for w in waves])
    if streams == 1:
        aggregate = per_stream
    ttfts = [t for w in waves for t in w["ttft_s"]]
    return {
        "prompt_type": prompt_type,
        "streams": streams,
        "runs": len(waves),
        "figure": per_stream if streams == 1 else aggregate,
        "figure_kind": "median per-stream decode tok/s" if streams == 1 else "median aggregate decode tok/s",
        "per_stream_tps": per_stream,
        "aggregate_tps": aggregate,
        "ttft_median_s": _median(ttfts),
        "ttft_min_s": min(ttfts) if ttfts else None,
        "ttft_max_s": max(ttfts) if ttfts else None,
        "streams_failed": sum(w["streams_failed"] for w in waves),
        "streams_left_out": sum(w.get("streams_left_out", 0) for w in waves),
        "waves_started_busy": sum(1 for w in waves if w.get("server_busy_before")),
        "streams_burst": sum(w.get("streams_burst", 0) for w in waves),
        "foreign_tokens": sum(w.get("foreign_tokens") or 0 for w in waves),
        "waves": waves,
    }


def decode_body(client: Client, prompt: str, cfg: ProtocolConfig, i: int, n: int) -> dict:
    text = with_nonce(prompt) + (f" (stream {i + 1}/{n})" if n > 1 else "")
    # return_token_ids: vLLM names the tokens of each event (several under speculative decoding),
    # so the client's count stays exact; servers that do not know the field ignore it
    return client.chat_body(
        text, cfg.max_tokens, forced=True, chat_template_kwargs={"enable_thinking": False}, return_token_ids=True
    )


async def run_wave(client: Client, prompt: str, cfg: ProtocolConfig, n: int, tag: str) -> list[RequestRecord]:
    records = await asyncio.gather(
        *(
            client.stream(decode_body(client, prompt, cfg, i, n), tag=tag, stream_index=i, concurrency=n)
            for i in range(n)
        )
    )
    return [check_counts(r) for r in records]


async def retokenize(client: Client, records: list[RequestRecord]) -> None:
    """After a wave (outside its timing): the server's /tokenize of each trusted reply's text.

    Reported, not a reason to leave a request out: re-tokenizing generated text need not give
    back the generated count (a model may emit a split the tokenizer would not make, and partial
    UTF-8 decodes to U+FFFD, which re-encodes as three byte tokens)."""
    for r in records:
        if r.trusted and r.text:
            r.retokenized_tokens = await client.count_tokens(r.text)


async def server_metrics(client: Client, names: tuple[str, ...]) -> dict[str, float]:
    """Sums of the named Prometheus series from /metrics ({} when the server has none)."""
    try:
        status, text = await client.get_text("/metrics")
    except ANSWER_ERRORS:
        return {}
    if status != 200:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            try:
                v = float(line.rsplit(" ", 1)[1])
            except ValueError:
                continue
            if math.isfinite(v):  # a NaN/inf counter is not a count: never reaches a figure
                out[name] = out.get(name, 0.0) + v
    return {k: v for k, v in out.items() if math.isfinite(v)}


async def prefix_cache_hits(client: Client) -> float | None:
    """vLLM's prefix-cache hit counter, or None if not exposed."""
    m = await server_metrics(client, ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits"))
    return sum(m.values()) if m else None


IDLE = ("vllm:num_requests_running", "vllm:num_requests_waiting")
GEN_TOKENS = ("vllm:generation_tokens_total",)


async def wait_idle(client: Client, timeout: float = 60.0) -> dict:
    """Before a wave: the server must have nothing running or waiting (others' traffic or a
    zombie request would skew the figures). Waits up to `timeout`; returns what it saw."""

    t0 = time.monotonic()
    while True:
        m = await server_metrics(client, IDLE)
        busy = sum(m.values()) if m else 0.0
        if busy == 0 or time.monotonic() - t0 > timeout:
            return {"busy_before": busy, "waited_s": round(time.monotonic() - t0, 2), "metrics": bool(m)}
        await asyncio.sleep(0.5)


async def cold_prompt_ids(client: Client, n_tokens: int, seed: str) -> list[int] | None:
    """Exactly n_tokens ids of distinct filler via the server's /tokenize; None if unavailable."""
    text = filler(int(n_tokens * 1.2) + 16, seed=seed)
    try:
        ids = await client.tokenize(text)
        while len(ids) < n_tokens:
            text += " " + filler(n_tokens, seed=seed + "+")
            ids = await client.tokenize(text)
    except ANSWER_ERRORS:
        return None
    return ids[:n_tokens]


async def run_prefill(
    client: Client, cfg: ProtocolConfig, max_model_len: int | None, measured: list[RequestRecord] | None = None
) -> dict:
    n_tokens = cfg.prefill_tokens
    if max_model_len:
        n_tokens = min(n_tokens, max_model_len - 8)
    hits_before = await prefix_cache_hits(client)
    runs = []
    for i in range(cfg.prefill_runs):
        seed = make_nonce()
        ids = await cold_prompt_ids(client, n_tokens, seed)
        body = {
            "prompt": ids if ids is not None else filler(int(n_tokens * 0.75), seed=seed),
            "max_tokens": 1,
            "temperature": 0.0,
        }
        rec = check_counts(await client.stream(body, kind="completions", tag=f"prefill-{i}"))
        if ids is None and rec.trusted:
            rec.excluded = "prompt-uncounted: the server has no usable /tokenize, so the client cannot count the prompt"
        runs.append(rec)
    if measured is not None:
        measured += runs
    hits_after = await prefix_cache_hits(client)
    trusted = [r for r in runs if r.trusted]
    rates = [r.prefill_tps for r in trusted if r.prefill_tps]
    return {
        "prompt_tokens_target": n_tokens,
        "runs": len(runs),
        "runs_ok": len(trusted),
        "prompt_tokens": [r.prompt_tokens_sent for r in trusted],
        "prefill_tps": rates,
        "median_prefill_tps": _median(rates),
        "ttft_s": [r.ttft for r in trusted],
        "median_ttft_s": _median([r.ttft for r in trusted]),
        "errors": [r.error for r in runs if r.error],
        "left_out": [r.left_out for r in runs if r.left_out],
        "prefix_cache_hits_delta": (hits_after - hits_before)
        if hits_before is not None and hits_after is not None
        else None,
        "requests": [r.summary() for r in runs],
    }


async def run_protocol(client: Client, cfg: ProtocolConfig, progress: Callable[[str], None] | None = None) -> dict:
    """Run warm-ups, every (prompt type, level) cell and the cold prefill; return the results."""
    say = progress or (lambda s: None)
    prompts = {t: load_prompt(t) for t in cfg.prompt_types}
    await client.resolve_model()
    for k in range(cfg.warmups):  # the first requests pay for compilation/JIT; discarded
        say(f"warm-up {k + 1}/{cfg.warmups}")
        await run_wave(client, prompts[cfg.prompt_types[0]], cfg, 1, "warmup")
    cells = []
    measured: list[RequestRecord] = []
    for ptype in cfg.prompt_types:
        for n in cfg.levels:
            runs = cfg.single_runs if n == 1 else cfg.multi_runs
            waves = []
            for r in range(runs):
                say(f"{ptype} x{n} run {r + 1}/{runs}")
                idle = await wait_idle(client)
                gen0 = await server_metrics(client, GEN_TOKENS)
                recs = await run_wave(client, prompts[ptype], cfg, n, f"{ptype}-c{n}")
                gen1 = await server_metrics(client, GEN_TOKENS)
                await retokenize(client, recs)
                measured += recs
                w = wave_stats(recs)
                w["server_busy_before"] = idle["busy_before"]
                if gen0 and gen1:  # tokens the server generated in the wave that were not ours
                    w["foreign_tokens"] = (
                        gen1[GEN_TOKENS[0]] - gen0[GEN_TOKENS[0]] - sum(r_["token_events"] for r_ in w["requests"])
                    )
                waves.append(w)
            cells.append(level_summary(ptype, n, waves))
    max_len = None
    try:
        models = await client.models()
        max_len = models["data"][0].get("max_model_len")
    except (*ANSWER_ERRORS, AttributeError):  # AttributeError: an entry that is not an object
        pass
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len <= 16:
        max_len = None  # the server's claim of its context length, used only when it is a sane integer
    prefill = None
    if cfg.prefill_runs > 0:
        say(f"cold prefill {cfg.prefill_tokens} tokens x{cfg.prefill_runs}")
        prefill = await run_prefill(client, cfg, max_len, measured)
    summary = left_out_summary(measured)
    if measured and summary["left_out"] == summary["requests"]:
        reasons = "; ".join(f"{n} {code}" for code, n in summary["reasons"].items())
        raise RecipekitError(
            code="bench-untrusted",
            exit_code=ExitCode.FAILURE,
            message=f"no figure: all {summary['requests']} measured requests were left out ({reasons}); "
            f"first: {summary['first'][next(iter(summary['reasons']))]}",
            hint="the server's answers disagree with what the client observed (or failed); check --url and the server",
        )
    return {
        "protocol": PROTOCOL_VERSION,
        "config": asdict(cfg),
        "prompts_sha256": {t: PROMPT_SHA256[t] for t in cfg.prompt_types},
        "decode": cells,
        "prefill": prefill,
        "left_out": summary,
        "retokenized": retokenized_summary(client, measured),
    }


def left_out_summary(records: list[RequestRecord]) -> dict:
    """How many measured requests gave no figure, by reason code (the part before ':')."""
    reasons: dict[str, int] = {}
    first: dict[str, str] = {}
    for r in records:
        why = r.left_out
        if why:
            code = why.split(":", 1)[0]
            reasons[code] = reasons.get(code, 0) + 1
            first.setdefault(code, why[:300])
    return {"requests": len(records), "left_out": sum(reasons.values()), "reasons": reasons, "first": first}


def retokenized_summary(client: Client, records: list[RequestRecord]) -> dict:
    """Trusted replies re-tokenized by the server, and how many differ from the stream's count."""
    checked = [r for r in records if r.retokenized_tokens is not None]
    return {
        "checked": len(checked),
        "disagree": sum(1 for r in checked if abs((r.retokenized_tokens or 0) - r.token_events) > COUNT_TOLERANCE),
        "unavailable": client.tokenize_error,
    }
