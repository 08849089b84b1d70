"""Functional P2P probe: run the torch worker in a subprocess with a hard timeout, recompute
every expected value, and say "ok", "wrong data" or "hang" for each phase, apart.

Phases: identity (devices, UUIDs, driver, canAccessPeer), device-to-device copies of every
ordered pair at sizes straddling 128 KiB and 512 KiB (peer and host-staged), and an all-reduce
over all GPUs with P2P on and with NCCL_P2P_DISABLE=1. Each phase runs in its own process
group; on timeout the whole group is killed (the NCCL ranks included) and the phase is a
"hang". Results are cached per driver + GPU UUID set + boot_id + probe source hash, so a
reboot or a driver change re-runs it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from recipekit import atomic, bounded
from recipekit.errors import RecipekitError
from recipekit.tools.p2p import patterns

SCHEMA = 1
WORKER = Path(__file__).with_name("worker.py")
VERDICT_ORDER = ("wrong data", "hang", "error", "ok")  # worst first
# Environment knobs the probe must not inherit: it decides P2P on/off itself.
_P2P_ENV = ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL")


@dataclass
class PhaseResult:
    name: str  # copy-peer, copy-staged, allreduce-p2p-on, allreduce-p2p-off
    p2p: bool  # does this phase use P2P (else: the reference path)
    verdict: str  # ok | wrong data | hang | error | skip
    checked: int = 0  # records compared with the expected value
    expected: int = 0
    mismatches: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    env: dict = field(default_factory=dict)
    detail: str = ""
    bandwidth_gbs: dict = field(default_factory=dict)  # size -> best GB/s (copies only)
    params: dict = field(default_factory=dict)  # sizes / elements + world: enough to re-judge
    records: list = field(default_factory=list)  # [*key, sha256] as the worker reported them


@dataclass
class ProbeResult:
    verdict: str  # ok | wrong data | hang | error | skipped
    p2p_usable: bool
    reason: str
    python: str | None = None
    identity: dict = field(default_factory=dict)
    phases: list[PhaseResult] = field(default_factory=list)
    key: dict = field(default_factory=dict)
    cached: bool = False
    created_at: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ProbeResult":
        d = dict(d)
        d["phases"] = [PhaseResult(**p) for p in d.get("phases", [])]
        return cls(**d)

    def phase(self, name: str) -> PhaseResult | None:
        return next((p for p in self.phases if p.name == name), None)


# --- running one phase ----------------------------------------------------------------------


@dataclass
class _Run:
    returncode: int | None
    timed_out: bool
    seconds: float
    stderr_tail: str


def _run_group(cmd: list[str], env: dict, timeout_s: float, cwd: str) -> _Run:
    """Run cmd in a new session; on timeout kill its whole process group (TERM, then KILL)."""
    with tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(proc)
        tail = _tail_text(err, 4000)
        return _Run(None if timed_out else proc.returncode, timed_out, time.monotonic() - t0, tail)


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill what is left of the worker's process group (also after a clean exit: stray ranks)."""
    for sig, grace in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
        # the leader is gone; give the rest of the group a moment, then the next signal
        if not _group_alive(proc.pid):
            break
        time.sleep(0.2)
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _read_jsonl(path: Path) -> list[dict]:
    """The JSON lines a worker phase wrote (our own worker: at most WORKER_STDOUT_MAX bytes are read)."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return []
    out = []
    with f:
        for line in _head_lines(f, WORKER_STDOUT_MAX):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a line cut by a kill
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- judging ----------------------------------------------------------------------------------


def _judge(
    name: str,
    p2p: bool,
    expected: dict,
    got: list[dict],
    key_of: Callable[[dict], Any],
    run: _Run,
    env: dict,
    bandwidth: dict | None = None,
    params: dict | None = None,
    record_of: Callable[[dict], list] | None = None,
) -> PhaseResult:
    """Compare reported digests with the expected ones; the worst finding decides."""
    seen: dict = {}
    mismatches = []
    records = []
    for rec in got:
        k = key_of(rec)
        if k not in expected:
            continue
        seen[k] = rec
        if record_of:
            records.append(record_of(rec))
        if rec.get("sha256") != expected[k]:
            mismatches.append(
                {"at": list(k) if isinstance(k, tuple) else k, "got": rec.get("sha256"), "want": expected[k]}
            )
    missing = [k for k in expected if k not in seen]
    if mismatches:
        verdict = "wrong data"
    elif run.timed_out and missing:
        verdict = "hang"
    elif missing or (run.returncode not in (0, None)):
        verdict = "error"
    else:
        verdict = "ok"
    detail = ""
    if verdict == "hang":
        first = missing[0]
        detail = f"no result after {run.seconds:.0f}s; first missing: {first}"
    elif verdict == "error":
        detail = f"exit {run.returncode}; {len(missing)} result(s) missing; " + run.stderr_tail.strip()[-600:]
    elif verdict == "wrong data":
        detail = f"{len(mismatches)} of {len(seen)} result(s) differ from the expected bytes"
    return PhaseResult(
        name=name,
        p2p=p2p,
        verdict=verdict,
        checked=len(seen),
        expected=len(expected),
        mismatches=mismatches[:20],
        seconds=round(run.seconds, 2),
        env=env,
        detail=detail,
        bandwidth_gbs=bandwidth or {},
        params=params or {},
        records=records,
    )


def _copy_bandwidth(records: list[dict], mode: str) -> dict:
    best: dict = {}
    for r in records:
        if r.get("event") == "copy" and r.get("mode") == mode and r.get("seconds"):
            gbs = r["size"] / r["seconds"] / 1e9
            best[str(r["size"])] = round(max(best.get(str(r["size"]), 0.0), gbs), 2)
    return best


def overall(phases: list[PhaseResult], identity: dict) -> tuple[str, bool, str]:
    """(verdict, p2p_usable, reason) from the phases. Only P2P phases decide the verdict; the
    reference (host-staged, NCCL_P2P_DISABLE=1) phases tell whether the fault is P2P at all."""
    p2p = [p for p in phases if p.p2p and p.verdict != "skip"]
    ref = [p for p in phases if not p.p2p and p.verdict != "skip"]
    if not p2p:
        return "skipped", False, "no P2P phase ran"
    verdict = next(v for v in VERDICT_ORDER if v == "ok" or any(p.verdict == v for p in p2p))
    bad = [f"{p.name}: {p.verdict}" for p in p2p if p.verdict != "ok"]
    ref_bad = [f"{p.name}: {p.verdict}" for p in ref if p.verdict != "ok"]
    not_adv = _not_advertised(identity)
    if verdict != "ok":
        reason = "; ".join(bad)
        if ref_bad:
            reason += f" (the non-P2P path fails too: {'; '.join(ref_bad)} - not a P2P-only fault)"
        return verdict, False, reason
    if not_adv:
        return (
            "ok",
            False,
            (
                "values correct, but peer access is not advertised for "
                + ", ".join(not_adv)
                + " (copies went through the host)"
            ),
        )
    if ref_bad:
        return "ok", True, f"P2P paths correct; reference path: {'; '.join(ref_bad)}"
    return "ok", True, "every copy size and the all-reduce returned the expected bytes with P2P on and off"


def rejudge(phase: PhaseResult) -> list[str]:
    """Recompute the expected value of every stored record of a phase: the descriptions of the
    records that do not match (empty = the stored bytes were right). For recorded results."""
    bad = []
    if phase.name.startswith("copy-"):
        index = {s: i for i, s in enumerate(phase.params.get("sizes", []))}
        for size, src, dst, sha in phase.records:
            want = patterns.expected_copy_sha256(size, patterns.copy_seed(index[size], src, dst))
            if sha != want:
                bad.append(f"copy {src}->{dst} {size} bytes")
    elif phase.name.startswith("allreduce-"):
        world = phase.params["world"]
        for rank, n, sha in phase.records:
            if sha != patterns.expected_allreduce_sha256(n, world):
                bad.append(f"all-reduce rank {rank} {n} elements")
    return bad


def _not_advertised(identity: dict) -> list[str]:
    peer = identity.get("peer") or []
    return [f"{i}->{j}" for i, row in enumerate(peer) for j, v in enumerate(row) if i != j and v is False]


# --- cache ------------------------------------------------------------------------------------


def probe_sha() -> str:
    h = hashlib.sha256()
    for f in (WORKER, Path(__file__), Path(patterns.__file__)):
        h.update(f.read_bytes())
    return h.hexdigest()


def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def norm_uuid(u: str | None) -> str | None:
    if not u:
        return None
    u = u.strip().lower()
    return u[4:] if u.startswith("gpu-") else u


def cache_key(driver: str | None, uuids: Sequence[str | None], boot: str | None, sha: str) -> dict | None:
    """The cache key, or None when a part is unknown (then nothing is cached)."""
    ids = [norm_uuid(u) for u in uuids]
    if not driver or not ids or any(i is None for i in ids) or not boot:
        return None
    return {"schema": SCHEMA, "driver": driver, "gpu_uuids": sorted(ids), "boot_id": boot, "probe_sha": sha}


def _cache_path(cache_dir: Path, key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return cache_dir / f"p2p-{digest}.json"


CACHE_MAX_BYTES = 16 * 1024 * 1024  # a result keeps per-phase records; real ones are a few hundred KiB


def cache_load(cache_dir: Path, key: dict) -> ProbeResult | None:
    """The cached result for `key`; None when there is none or the entry is not one we wrote (a
    regular file: re-probed and replaced). Something other than a regular file there is refused."""
    from pydantic import TypeAdapter, ValidationError  # lazy: pulls pydantic

    path = _cache_path(cache_dir, key)
    what = "p2p probe cache entry"
    try:
        text = bounded.read_text(
            path,
            what,
            CACHE_MAX_BYTES,
            code="p2p-cache-unreadable",
            too_large_code="p2p-cache-bad",
            not_text_code="p2p-cache-bad",
        )
        # JSON mode: strict types (no "1" for 1), nested dataclasses built, nesting depth limited
        res = TypeAdapter(ProbeResult).validate_json(text, strict=True)
    except FileNotFoundError:
        return None
    except (ValidationError, RecipekitError) as e:
        if isinstance(e, RecipekitError) and e.code != "p2p-cache-bad":
            e.hint = f"delete {path} (the probe runs again)"
            raise
        return None
    if res.key != key:
        return None
    res.cached = True
    return res


def cache_store(cache_dir: Path, key: dict, result: ProbeResult) -> Path:
    """Atomic: temp file in the same folder, fsync, rename."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = _cache_path(cache_dir, key)
    atomic.atomic_write_text(path, json.dumps(result.to_dict(), indent=2), sync_dir=None)
    return path


def cached_result(cache_dir: Path, driver: str | None, gpu_uuids: list[str | None]) -> ProbeResult | None:
    """The cached result for this driver + GPU set + boot, if any (no subprocess, no CUDA)."""
    key = cache_key(driver, gpu_uuids, boot_id(), probe_sha())
    return cache_load(cache_dir, key) if key else None


# --- finding a python with torch --------------------------------------------------------------

_TORCH_INFO = (
    "import json, torch; print(json.dumps({'torch': torch.__version__, "
    "'cuda': torch.cuda.is_available(), 'count': torch.cuda.device_count()}))"
)


def torch_info(python: str, timeout_s: float = 90) -> dict | None:
    try:
        r = subprocess.run(
            [python, "-c", _TORCH_INFO], capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return None


# what run_json_worker keeps of a worker's output: its records are a few hundred bytes each; a worker
# that prints more than this is broken, and its rest is dropped (the callers' judges then see the
# records missing), never read into memory
WORKER_STDOUT_MAX = 4 * 1024 * 1024
STDERR_TAIL = 2000


def _head_lines(f: Any, limit: int) -> list[str]:
    """The complete lines among the first `limit` bytes of the open file `f` (a cut last line dropped)."""
    f.seek(0)
    data = f.read(limit + 1)
    if len(data) > limit:
        data = data[: data.rfind(b"\n", 0, limit) + 1]
    return data.decode(errors="replace").splitlines()


def _tail_text(f: Any, nbytes: int) -> str:
    f.seek(0, os.SEEK_END)
    f.seek(max(0, f.tell() - nbytes))
    return f.read(nbytes).decode(errors="replace")


def run_json_worker(argv: list[str], timeout_s: float) -> tuple[list[dict], str]:
    """Run one of our worker scripts (argv starts with the torch python) bounded by timeout_s and in
    memory: the JSON objects it printed one per stdout line among its first WORKER_STDOUT_MAX bytes,
    and its stderr tail. Its output goes to temporary files, never into a pipe read whole. On timeout
    its process group is killed and TimeoutExpired reaches the caller."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise
        _kill_group(proc)  # a stray child of the worker's
        records = []
        for line in _head_lines(out, WORKER_STDOUT_MAX):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                records.append(doc)
        return records, _tail_text(err, STDERR_TAIL)


def find_torch_python(
    explicit: str | None = None, venvs: Path | None = None
) -> tuple[str | None, dict | None, list[str]]:
    """(python, torch info, candidates tried). An explicit --python is used as is; otherwise
    the first candidate whose torch sees CUDA wins, else the first with torch at all."""
    if explicit:
        return explicit, torch_info(explicit), [explicit]
    cands = []
    env = os.environ.get("RECIPEKIT_TORCH_PYTHON")
    if env:
        cands.append(env)
    for name in ("python3", "python"):
        p = shutil.which(name)
        if p:
            cands.append(p)
    if venvs and venvs.is_dir():
        cands += [str(p) for p in sorted(venvs.glob("*/bin/python"))]
    seen, tried, first_torch = set(), [], None
    for c in cands:
        real = os.path.realpath(c)
        if real in seen:
            continue
        seen.add(real)
        tried.append(c)
        info = torch_info(c)
        if info and info.get("cuda"):
            return c, info, tried
        if info and first_torch is None:
            first_torch = (c, info)
    return (first_torch[0], first_torch[1], tried) if first_torch else (None, None, tried)


# --- the probe ----------------------------------------------------------------------------------


def _probe_lock(cache_dir: Path | None, timeout_s: float) -> contextlib.AbstractContextManager[object]:
    """With a cache dir, one probe at a time on the host (a file lock); without one, no lock."""
    if cache_dir is None:
        return contextlib.nullcontext()
    from recipekit.lock import hold  # lazy: pulls filelock

    return hold(cache_dir / "probe.lock", timeout=6 * timeout_s + 300)


def run_probe(
    python: str,
    *,
    worker: Path = WORKER,
    timeout_s: float = 120.0,
    cpu_devices: int = 0,
    copy_sizes=patterns.COPY_SIZES,
    allreduce_elements=patterns.ALLREDUCE_ELEMENTS,
    driver: str | None = None,
    gpu_uuids: list[str] | None = None,
    cache_dir: Path | None = None,
    refresh: bool = False,
    extra_env: dict | None = None,
) -> ProbeResult:
    """Run (or reuse) the probe. `driver`/`gpu_uuids` come from nvidia-smi when known, so a
    cache hit needs no CUDA at all; otherwise the identity phase supplies them. With a cache
    dir, one probe runs at a time on the host (a file lock); a waiter reuses its result."""
    with _probe_lock(cache_dir, timeout_s):
        worker = Path(worker).resolve()
        sha = probe_sha()
        boot = boot_id()
        key = cache_key(driver, gpu_uuids or [], boot, sha)
        if key and cache_dir and not refresh:
            hit = cache_load(cache_dir, key)
            if hit:
                return hit
        base_env = {k: v for k, v in os.environ.items() if k not in _P2P_ENV}
        base_env.update(extra_env or {})
        base_env.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast in a probe
        base_env.setdefault("PYTHONUNBUFFERED", "1")
        cpu_arg = ["--cpu-devices", str(cpu_devices)] if cpu_devices else []
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

        with tempfile.TemporaryDirectory(prefix="recipekit-p2p-") as tmpd:
            tmp = Path(tmpd)
            # identity
            out = tmp / "identity.jsonl"
            run = _run_group(
                [python, str(worker), "identity", "--out", str(out), *cpu_arg], base_env, min(timeout_s, 120.0), tmpd
            )
            ident = next((r for r in _read_jsonl(out) if r.get("event") == "identity"), None)
            if ident is None:
                what = "hang" if run.timed_out else "error"
                return ProbeResult(
                    verdict=what,
                    p2p_usable=False,
                    python=python,
                    created_at=created,
                    reason=f"identity phase: {what}: {run.stderr_tail.strip()[-600:]}",
                )
            ident = {k: v for k, v in ident.items() if k != "event"}
            n = int(ident.get("count") or 0)
            if key is None:
                key = cache_key(
                    driver or ident.get("driver"), [d.get("uuid") for d in ident.get("devices", [])], boot, sha
                )
                if key and cache_dir and not refresh:
                    hit = cache_load(cache_dir, key)
                    if hit:
                        return hit
            if n < 2:
                return ProbeResult(
                    verdict="skipped",
                    p2p_usable=False,
                    python=python,
                    identity=ident,
                    created_at=created,
                    key=key or {},
                    reason=f"{n} GPU(s) visible to {python}: P2P needs at least 2",
                )

            phases: list[PhaseResult] = []
            # copies: every ordered pair, each size, peer and host-staged
            out = tmp / "copy.jsonl"
            sizes = ",".join(str(s) for s in copy_sizes)
            run = _run_group(
                [python, str(worker), "copy", "--out", str(out), "--sizes", sizes, *cpu_arg], base_env, timeout_s, tmpd
            )
            recs = [r for r in _read_jsonl(out) if r.get("event") == "copy"]
            for mode, p2p in (("peer", True), ("staged", False)):
                expected = {
                    (si, a, b, mode): patterns.expected_copy_sha256(s, patterns.copy_seed(si, a, b))
                    for si, s in enumerate(copy_sizes)
                    for a in range(n)
                    for b in range(n)
                    if a != b
                }
                size_index = {s: i for i, s in enumerate(copy_sizes)}
                phases.append(
                    _judge(
                        f"copy-{mode}",
                        p2p,
                        expected,
                        recs,
                        lambda r: (size_index.get(r.get("size")), r.get("src"), r.get("dst"), r.get("mode")),  # noqa: B023  (_judge calls it at once)
                        run,
                        {},
                        _copy_bandwidth(recs, mode),
                        {"sizes": list(copy_sizes), "world": n},
                        lambda r: [r.get("size"), r.get("src"), r.get("dst"), r.get("sha256")],
                    )
                )

            # all-reduce with P2P on, then off
            elements = ",".join(str(e) for e in allreduce_elements)
            for name, p2p, knobs in (
                ("allreduce-p2p-on", True, {"NCCL_P2P_LEVEL": "SYS"}),
                ("allreduce-p2p-off", False, {"NCCL_P2P_DISABLE": "1"}),
            ):
                rdir = tmp / name
                rdir.mkdir()
                env = {**base_env, **knobs}
                run = _run_group(
                    [
                        python,
                        str(worker),
                        "allreduce",
                        "--out-dir",
                        str(rdir),
                        "--elements",
                        elements,
                        "--port",
                        str(free_port()),
                        *cpu_arg,
                    ],
                    env,
                    timeout_s,
                    tmpd,
                )
                recs = [r for f in sorted(rdir.glob("rank*.jsonl")) for r in _read_jsonl(f)]
                expected_ar: dict[tuple[int, int], str] = {
                    (rank, e): patterns.expected_allreduce_sha256(e, n) for rank in range(n) for e in allreduce_elements
                }
                phases.append(
                    _judge(
                        name,
                        p2p,
                        expected_ar,
                        [r for r in recs if r.get("event") == "allreduce"],
                        lambda r: (r.get("rank"), r.get("elements")),
                        run,
                        knobs,
                        None,
                        {"elements": list(allreduce_elements), "world": n},
                        lambda r: [r.get("rank"), r.get("elements"), r.get("sha256")],
                    )
                )

        verdict, usable, reason = overall(phases, ident)
        result = ProbeResult(
            verdict=verdict,
            p2p_usable=usable,
            reason=reason,
            python=python,
            identity=ident,
            phases=phases,
            key=key or {},
            created_at=created,
        )
        if key and cache_dir and verdict in ("ok", "wrong data", "hang"):
            cache_store(cache_dir, key, result)
        return result
