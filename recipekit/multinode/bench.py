"""Measured: start-up time to ready and decode throughput of each multi-node form of the local
recipe against the single-node recipe in the same run (ratios), and the balancer's added latency.

    python -m recipekit.multinode.bench [--forms single,pp2-mp,tp2-mp,2x-replicas] [--tokens 128]
                                        [--runs 3] [--lb-requests 20] [--format json]

Each form's node commands are the rendered ones (recipekit.multinode.nodes + the cpu backend's
serve artifact), started as process groups on loopback with free ports and stopped afterwards.
Start-up = first process start -> the head's /v1/models answers 200. Decode = one stream at a
time, forced length (min_tokens = max_tokens, ignore_eos), (tokens counted on the stream - 1) / (last
token time - first token time), median of `--runs`; a usage that disagrees with the count gives no figure. Balancer latency = median wall time of a 1-token
completion through HAProxy minus the same sent straight to a replica (alternating, same run).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from recipekit.apply import http_probe
from recipekit.apply.auto import load_recipe
from recipekit.apply.http_probe import finite_int
from recipekit.backends.registry import render_artifact

SINGLE = "single"
FORMS = (SINGLE, "pp2-mp", "tp2-mp", "2x-replicas")
RECIPE = "tiny-deepseek-cpu"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _commands(layout: str | None, sets: list[str]) -> list[tuple[list[str], dict[str, str]]]:
    from recipekit.config import effective_config  # lazy: pulls pydantic
    from recipekit.multinode.render import checked_nodes  # lazy: pulls pydantic

    loaded = load_recipe(RECIPE)
    if layout is None:
        effs = [effective_config(loaded, environ={}, sets=sets, host_paths=True)]
    else:
        effs = [n.eff for n in checked_nodes(loaded, layout, environ={}, sets=sets, host_paths=True)]
    return [(render_artifact(e, "serve").argv or [], dict(e.exported_env())) for e in effs]


class Form:
    def __init__(self, name: str, root: Path, model_dir: Path):
        self.name = name
        self.port, self.node1_port, self.master, self.lb = (_free_port() for _ in range(4))
        self.sets = [
            f"PORT={self.port}",
            f"NODE1_PORT={self.node1_port}",
            f"MASTER_PORT={self.master}",
            f"LB_PORT={self.lb}",
            f"MODEL_DIR={model_dir}",
        ]
        self.root = root
        self.procs: list[subprocess.Popen] = []

    def start(self, timeout_s: float) -> float:
        cmds = _commands(None if self.name == SINGLE else self.name, self.sets)
        t0 = time.monotonic()
        for i, (argv, env) in enumerate(reversed(cmds)):  # workers first, the head last
            log = open(self.root / f"{self.name}-{len(cmds) - 1 - i}.log", "wb")
            self.procs.append(
                subprocess.Popen(
                    argv,
                    env={**os.environ, **env},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    cwd=self.root,
                )
            )
        urls = [
            f"http://127.0.0.1:{p}"
            for p in ([self.port, self.node1_port] if self.name == "2x-replicas" else [self.port])
        ]
        while True:
            if all(_ok(u + "/v1/models") for u in urls):
                return time.monotonic() - t0
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"{self.name}: a node exited during start-up (logs in {self.root})")
            if time.monotonic() - t0 > timeout_s:
                raise RuntimeError(f"{self.name}: not ready in {timeout_s} s")
            time.sleep(0.5)

    def stop(self) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


STREAM_MAX_BYTES = 16 * 1024 * 1024  # a forced stream of a few hundred tokens is tens of KiB
STREAM_DEADLINE_S = 300.0  # the whole stream, headers to [DONE]: a server trickling bytes is cut off there


def _event_tokens(event: Any) -> int:
    """Tokens one stream event carries: its `token_ids` (vLLM's `return_token_ids`), each a non-negative integer, or
    one for an event with text and no ids; 0 for an event without a choice (the usage event). Anything that is not
    an OpenAI chunk is refused (RuntimeError): a figure is never computed around an event it could not read."""
    if not isinstance(event, dict):
        raise RuntimeError(f"a stream event is not an OpenAI chunk: {str(event)[:80]!r}: no figure")
    choices = event.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(choice, dict):
        return 0
    ids = choice.get("token_ids")
    if ids is None:
        return 1 if choice.get("text") else 0
    if not isinstance(ids, list) or any(finite_int(t) is None or t < 0 for t in ids):
        raise RuntimeError(f"token_ids {str(ids)[:80]} are not non-negative integers: no figure")
    return len(ids)


def decode_tps(url: str, tokens: int) -> float:
    """Decode tokens/s of one forced stream of `tokens` tokens, from the tokens counted on the stream (vLLM's
    `return_token_ids`: each event's ids; an event without them counts as one token) and their events' arrival
    times. The stream must carry exactly the tokens asked for and end with [DONE] within STREAM_DEADLINE_S and
    STREAM_MAX_BYTES; the server's usage must agree within one token; else there is no figure (RuntimeError)."""
    body = {
        "model": "tiny-deepseek",
        "prompt": "Once upon a time",
        "max_tokens": tokens,
        "min_tokens": tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
    }
    r = http_probe.post_sse(url + "/v1/completions", body, timeout_s=STREAM_DEADLINE_S, max_bytes=STREAM_MAX_BYTES)
    if not r.ok or not r.done:
        raise RuntimeError(f"the stream for {tokens} tokens did not end with [DONE]: {r.why()}: no figure")
    times: list[float] = []
    counted, said = 0, None
    for event, at in zip(r.events, r.arrived):
        k = _event_tokens(event)
        if k:
            counted += k
            times.append(at)
        if isinstance(event, dict) and isinstance(event.get("usage"), dict):
            said = event["usage"].get("completion_tokens")
    usage = finite_int(said)
    if usage is None or abs(usage - counted) > 1:
        raise RuntimeError(f"usage says {said!r} completion tokens, the stream carried {counted}: no figure")
    if counted != tokens:
        raise RuntimeError(f"the stream carried {counted} tokens, {tokens} were forced: no figure")
    if counted < 2 or len(times) < 2 or times[-1] <= times[0]:
        raise RuntimeError(f"{counted} tokens in {len(times)} events: too few to time a decode")
    return (counted - 1) / (times[-1] - times[0])


def _one_token(url: str) -> float:
    t = time.monotonic()
    r = httpx.post(
        url + "/v1/completions", json={"model": "tiny-deepseek", "prompt": "Hi", "max_tokens": 1}, timeout=60
    )
    r.raise_for_status()
    return time.monotonic() - t


def balancer_latency(form: Form, requests: int) -> dict:
    exe = shutil.which("haproxy") or "/usr/sbin/haproxy"
    from recipekit.multinode.render import render  # lazy: pulls pydantic

    cfg = form.root / "haproxy.cfg"
    cfg.write_text(render(load_recipe(RECIPE), "2x-replicas", artifact="lb", environ={}, sets=form.sets).text)
    proc = subprocess.Popen(
        [exe, "-db", "-f", str(cfg)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        lb, direct = f"http://127.0.0.1:{form.lb}", f"http://127.0.0.1:{form.port}"
        t0 = time.monotonic()
        while not _ok(lb + "/health"):
            if time.monotonic() - t0 > 30:
                raise RuntimeError("haproxy did not answer in 30 s")
            time.sleep(0.2)
        via: list[float] = []
        straight: list[float] = []
        for i in range(requests):
            for which in ((lb, via), (direct, straight)) if i % 2 else ((direct, straight), (lb, via)):
                which[1].append(_one_token(which[0]))
        return {
            "median_direct_ms": 1000 * statistics.median(straight),
            "median_via_lb_ms": 1000 * statistics.median(via),
            "added_ms": 1000 * (statistics.median(via) - statistics.median(straight)),
            "requests": requests,
        }
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def run(forms: list[str], tokens: int, runs: int, lb_requests: int, timeout_s: float) -> dict:
    from recipekit.backends.cpu.tiny_model import make_tiny_deepseek  # lazy: pulls pydantic

    root = Path(tempfile.mkdtemp(prefix="rk-mnbench."))
    model = make_tiny_deepseek(root / "model")
    out: dict[str, Any] = {"tokens": tokens, "runs": runs, "forms": {}}
    try:
        for name in forms:
            f = Form(name, root, model)
            try:
                ready = f.start(timeout_s)
                decode_tps(f"http://127.0.0.1:{f.port}", 8)  # warm-up
                tps = [decode_tps(f"http://127.0.0.1:{f.port}", tokens) for _ in range(runs)]
                row: dict[str, Any] = {"ready_s": round(ready, 1), "decode_tps": round(statistics.median(tps), 1)}
                if name == "2x-replicas":
                    row["balancer"] = {
                        k: round(v, 2) if isinstance(v, float) else v
                        for k, v in balancer_latency(f, lb_requests).items()
                    }
                out["forms"][name] = row
            except RuntimeError as e:
                out["forms"][name] = {"error": str(e)}
            finally:
                f.stop()
        base = out["forms"].get(SINGLE, {})
        for name, row in out["forms"].items():
            if name != SINGLE and "ready_s" in row and "ready_s" in base:
                row["ready_ratio_vs_single"] = round(row["ready_s"] / base["ready_s"], 2)
                row["decode_ratio_vs_single"] = round(row["decode_tps"] / base["decode_tps"], 2)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m recipekit.multinode.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--forms", default=",".join(FORMS))
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--lb-requests", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--format", choices=("human", "json"), default="human")
    a = ap.parse_args(argv)
    res = run([x for x in a.forms.split(",") if x], a.tokens, a.runs, a.lb_requests, a.timeout)
    if a.format == "json":
        print(json.dumps(res, indent=2))
        return 0
    print(f"{'form':<12} {'ready s':>8} {'x single':>9} {'decode tok/s':>13} {'x single':>9}")
    for name, row in res["forms"].items():
        if "error" in row:
            print(f"{name:<12} error: {row['error']}")
            continue
        print(
            f"{name:<12} {row['ready_s']:>8} {row.get('ready_ratio_vs_single', 1.0):>9} {row['decode_tps']:>13} "
            f"{row.get('decode_ratio_vs_single', 1.0):>9}"
        )
        if "balancer" in row:
            b = row["balancer"]
            print(
                f"  balancer: {b['median_via_lb_ms']} ms via HAProxy vs {b['median_direct_ms']} ms direct "
                f"(+{b['added_ms']} ms per 1-token request, median of {b['requests']})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
