"""`recipe checkpoint bench-full`: the checkpoint commands timed at full size, beside the tiny size.

It builds, in a scratch folder, the tiny checkpoint with its EXL3 pack and the full-size original
layout with a full-size EXL3 pack as sparse files (recipekit.hybrid.fullsize: real headers, holes,
real codebook markers; a few tens of MB of disk), then runs each command as the user does (a fresh
`recipe` process: interpreter start and imports included) `--runs` times per size:
`check --checkpoint-format original`, `assemble --no-hash`, `check --checkpoint-format hybrid
--no-hash`, `engram place --mode link`, `engram verify --quick --model`. Per command it reports the
median wall seconds, the median CPU seconds (user + system, from the child's rusage: what a shared
machine's load does not inflate), the peak RSS (the child's ru_maxrss) and the bytes the process
handed to write() (/proc/self/io wchar, stdout included). The scratch folder is removed unless
--keep.

"Warm" includes Python's bytecode cache: the children write and read compiled modules under the
scratch folder (PYTHONPYCACHEPREFIX, PYTHONDONTWRITEBYTECODE dropped), filled by one untimed pass
of the tiny commands, so no run pays for compiling recipekit's sources (~0.1 s CPU a process where
the environment forbids writing bytecode next to them) and the installed tree is not written to.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from recipekit import bounded
from recipekit.checkpoint import dsv41
from recipekit.checkpoint.safetensors_io import INDEX_NAME
from recipekit.cli.checkpoint import checkpoint_app
from recipekit.cli.options import FormatOpt
from recipekit.errors import ExitCode, RecipekitError
from recipekit.output import Format, Output

# the goals of issue 28 on the 2-core development machine: seconds (wall) and peak RSS per command
GOAL_SECONDS = {"check original": 1.0, "assemble": 2.0, "check hybrid": 2.0}
GOAL_RSS_MIB = 256
CHILD_TIMEOUT_S = 600.0

# runs the CLI in this process, then writes its exit code, the bytes it handed to write() and its
# peak RSS (VmHWM: ru_maxrss would carry the forking parent's peak across exec) to argv[1]
_CHILD = """
import json, sys
from recipekit.cli.main import main
fig = {"rc": main(sys.argv[2:]), "wchar": None, "hwm_kib": None}
for path, key, out in (("/proc/self/io", "wchar", "wchar"), ("/proc/self/status", "VmHWM", "hwm_kib")):
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k == key:
                    fig[out] = int(v.split()[0])
    except OSError:
        pass
with open(sys.argv[1], "w") as f:
    json.dump(fig, f)
"""


# the CPU reference: json.loads of a fixed index-shaped text (the real index's entry count), timed in this
# process before and after the commands. This VM's CPU speed moves by tens of percent between machines and from
# minute to minute; the commands' seconds over the reference's compare across machines where seconds do not.
REFERENCE_ENTRIES = 188_245
REFERENCE_REPEATS = 3


def reference_text(entries: int = REFERENCE_ENTRIES) -> str:
    """An index-shaped JSON text of `entries` tensor names mapped to shard names (deterministic)."""
    weight_map = {
        f"model.layers.{i % 61}.mlp.experts.{i // 61}.w{i % 3 + 1}.weight": f"model-{i % 40 + 1:05d}-of-00040.safetensors"
        for i in range(entries)
    }
    return json.dumps({"metadata": {"total_size": entries}, "weight_map": weight_map})


def cpu_reference(text: str, repeats: int = REFERENCE_REPEATS) -> float:
    """Median seconds of `repeats` json.loads of `text`, each checked to hold every entry."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        doc = json.loads(text)
        times.append(time.perf_counter() - t0)
        if len(doc["weight_map"]) != doc["metadata"]["total_size"]:
            raise AssertionError("the reference text lost entries")  # a broken json module, not a user error
    return statistics.median(times)


def child_env(pycache: Path) -> dict[str, str]:
    """The children's environment: this one, with their bytecode cache under `pycache` and writing it allowed."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def _run_child(
    args: list[str], scratch: Path, ok: tuple[int, ...] = (0,), env: dict[str, str] | None = None
) -> dict[str, Any]:
    """One `recipe ARGS` process: wall and CPU seconds, peak RSS, bytes written, exit code (one of `ok`)."""
    res = scratch / "child-result.json"
    err = scratch / "child-output.txt"
    res.unlink(missing_ok=True)
    with open(err, "wb") as errf:
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, "-c", _CHILD, str(res), *args], stdout=errf, stderr=errf, env=env)
        deadline = t0 + CHILD_TIMEOUT_S
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                p.kill()
                p.wait()
                raise RecipekitError(
                    code="bench-timeout",
                    exit_code=ExitCode.FAILURE,
                    message=f"recipe {' '.join(args[:3])} ran past {CHILD_TIMEOUT_S:.0f} s",
                )
            time.sleep(0.005)
        wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    doc = bounded.read_json(res, "bench child result", 4096) if res.is_file() else {}
    if p.returncode != 0 or doc.get("rc") not in ok:
        tail = bounded.read_tail(err, "bench child output", 600).decode("utf-8", "replace").strip()
        raise RecipekitError(
            code="bench-command-failed",
            exit_code=ExitCode.FAILURE,
            message=f"recipe {' '.join(args)} exited {doc.get('rc', p.returncode)}: {tail[-300:]}",
        )
    return {
        "wall_s": wall,
        "cpu_s": ru.ru_utime + ru.ru_stime,
        "rss_mib": (doc["hwm_kib"] if doc.get("hwm_kib") else ru.ru_maxrss) / 1024,  # KiB
        "written": doc.get("wchar"),
        "rc": doc["rc"],
    }


def _commands(
    orig: Path, pack: Path, gaudi: Path, work: Path, i: int
) -> list[tuple[str, list[str], Path | None, tuple[int, ...]]]:
    """(label, argv, folder the run creates, accepted exit codes) in order; each run of assemble/place
    makes a fresh folder. `engram verify` may exit 2 at tiny size: the engine's rule refuses the tiny
    geometry's 64-wide Engram rows (it reads only 256-wide ones); the exit code is reported."""
    hyb, eng = work / f"hybrid-{i}", work / f"engram-{i}"
    return [
        ("check original", ["checkpoint", "check", str(orig), "--checkpoint-format", "original"], None, (0,)),
        ("check gaudi", ["checkpoint", "check", str(gaudi), "--checkpoint-format", "gaudi"], None, (0,)),
        (
            "assemble",
            ["checkpoint", "assemble", "--official", str(orig), "--exl3", str(pack), "-o", str(hyb), "--no-hash"],
            hyb,
            (0,),
        ),
        ("check hybrid", ["checkpoint", "check", str(hyb), "--checkpoint-format", "hybrid", "--no-hash"], None, (0,)),
        ("engram place", ["engram", "place", "--from", str(hyb), "--out", str(eng), "--mode", "link"], eng, (0,)),
        ("engram verify", ["engram", "verify", str(eng), "--quick", "--model", str(hyb)], None, (0, 2)),
    ]


def _measure(
    orig: Path,
    pack: Path,
    gaudi: Path,
    work: Path,
    runs: int,
    log: Callable[[str], None],
    env: dict[str, str] | None = None,
) -> dict[str, dict]:
    samples: dict[str, list[dict]] = {}
    for i in range(runs):
        made: list[Path] = []
        for label, args, creates, ok in _commands(orig, pack, gaudi, work, i):
            samples.setdefault(label, []).append(_run_child(args, work, ok, env))
            if creates is not None:
                made.append(creates)
        if i < runs - 1:  # the last run's folders stay for --keep
            for m in made:
                shutil.rmtree(m, ignore_errors=True)
        log(f"bench-full: {work.name} run {i + 1}/{runs} done")
    out = {}
    for label, ss in samples.items():
        written = [s["written"] for s in ss if s["written"] is not None]
        out[label] = {
            "median_s": round(statistics.median(s["wall_s"] for s in ss), 3),
            "median_cpu_s": round(statistics.median(s["cpu_s"] for s in ss), 3),
            "peak_rss_mib": round(max(s["rss_mib"] for s in ss), 1),
            "bytes_written": int(statistics.median(written)) if written else None,
            "runs": len(ss),
            "exit_codes": sorted({s["rc"] for s in ss}),
        }
    return out


def _sparse_gaudi(orig: Path, out: Path) -> dict[str, int]:
    """The Gaudi port's layout of `orig` (its contract and the converter's config), as sparse files."""
    from recipekit.backends.gaudi.convert import port_config  # lazy: the bench alone
    from recipekit.checkpoint.gaudi_port import engram_buckets, gaudi_tensors  # lazy: the bench alone
    from recipekit.checkpoint.manifest import sha256_file  # lazy: the bench alone
    from recipekit.checkpoint.sparse import write_sparse_layout  # lazy: the bench alone

    config = dsv41.load_config(orig)
    g = dsv41.Geometry.from_config(config)
    buckets = engram_buckets(g)
    specs = dict(dsv41.vision_tensors(config))
    specs.update(gaudi_tensors(g, buckets))
    return write_sparse_layout(out, specs, port_config(config, buckets, sha256_file(orig / INDEX_NAME)))


def bench_full(workdir: Path | None, runs: int, keep: bool, log: Callable[[str], None]) -> dict[str, Any]:
    from recipekit.backends.gaudi.convert import convert_to_gaudi  # lazy: the bench alone
    from recipekit.checkpoint.tiny_dsv41 import make_tiny_dsv41  # lazy: the bench alone
    from recipekit.hybrid.exl3 import make_tiny_exl3  # lazy: the bench alone
    from recipekit.hybrid.fullsize import disk_bytes, make_sparse_exl3, make_sparse_original  # lazy: the bench alone

    if runs < 1:
        raise RecipekitError(
            code="bad-bench-args",
            exit_code=ExitCode.INVALID_INPUT,
            message=f"--runs {runs}",
            hint="at least 1 run per command",
        )
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="recipekit-bench-full-", dir=workdir))
    try:
        tiny_dir, full_dir = base / "tiny", base / "full"
        tiny_dir.mkdir()
        full_dir.mkdir()
        log("bench-full: tiny checkpoint and EXL3 pack")
        make_tiny_dsv41(tiny_dir / "original")
        make_tiny_exl3(tiny_dir / "original", tiny_dir / "exl3")
        convert_to_gaudi(tiny_dir / "original", tiny_dir / "gaudi")
        log("bench-full: full-size sparse original layout and EXL3 pack")
        t0 = time.perf_counter()
        orig = make_sparse_original(tiny_dir / "original", full_dir / "original")
        pack = make_sparse_exl3(full_dir / "original", full_dir / "exl3")
        gaudi = _sparse_gaudi(full_dir / "original", full_dir / "gaudi")
        build_s = time.perf_counter() - t0
        env = child_env(base / "pycache")
        warm = base / "warmup"  # one untimed pass: fills the bytecode cache
        warm.mkdir()
        _measure(tiny_dir / "original", tiny_dir / "exl3", tiny_dir / "gaudi", warm, 1, log, env)
        ref_text = reference_text()
        ref_before = cpu_reference(ref_text)
        load_before = os.getloadavg()
        tiny = _measure(tiny_dir / "original", tiny_dir / "exl3", tiny_dir / "gaudi", tiny_dir, runs, log, env)
        full = _measure(full_dir / "original", full_dir / "exl3", full_dir / "gaudi", full_dir, runs, log, env)
        load_after = os.getloadavg()
        ref_after = cpu_reference(ref_text)
        goals = {}
        for label, fig in full.items():
            g: dict[str, Any] = {"rss_mib": GOAL_RSS_MIB, "rss_met": fig["peak_rss_mib"] <= GOAL_RSS_MIB}
            if label in GOAL_SECONDS:
                g["seconds"] = GOAL_SECONDS[label]
                g["seconds_met"] = fig["median_s"] <= GOAL_SECONDS[label]
            goals[label] = g
        return {
            "full_layout": {
                "original": orig,
                "exl3": pack,
                "gaudi": gaudi,
                "build_s": round(build_s, 2),
                "disk_bytes": disk_bytes(full_dir),
            },
            "runs": runs,
            "cpu_count": os.cpu_count(),
            "load_1m_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
            "cpu_reference": {
                "what": f"json.loads of a fixed {REFERENCE_ENTRIES:,}-entry index text ({len(ref_text):,} B), "
                f"median of {REFERENCE_REPEATS}, in the bench's own process",
                "seconds_before_after": [round(ref_before, 4), round(ref_after, 4)],
            },
            "bytecode_cache": "scratch PYTHONPYCACHEPREFIX, warmed by one untimed pass of the tiny commands",
            "tiny": tiny,
            "full": full,
            "goals_full": goals,
            "not_measured": [],
            "kept": str(base) if keep else None,
        }
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)


def render(r: dict[str, Any]) -> None:
    fl = r["full_layout"]
    typer.echo(
        f"full-size layout: original {fl['original']['tensors']:,} tensors in {fl['original']['shards']} shards "
        f"({fl['original']['payload']:,} B payload), EXL3 pack {fl['exl3']['tensors']:,} tensors in "
        f"{fl['exl3']['shards']} shards ({fl['exl3']['bits']} bits), Gaudi port {fl['gaudi']['tensors']:,} tensors in "
        f"{fl['gaudi']['shards']} shards; built in {fl['build_s']} s, "
        f"{fl['disk_bytes'] / 2**20:.1f} MiB on disk"
    )
    typer.echo(
        f"medians of {r['runs']}; {r['cpu_count']} CPUs, 1-min load {r['load_1m_before_after'][0]} before, "
        f"{r['load_1m_before_after'][1]} after (a shared machine: wall seconds grow with the load, CPU seconds less); "
        f"bytecode: {r['bytecode_cache']}"
    )
    ref = r["cpu_reference"]
    ref_s = statistics.mean(ref["seconds_before_after"])
    typer.echo(
        f"CPU reference ({ref['what']}): {ref['seconds_before_after'][0]:.3f} s before, "
        f"{ref['seconds_before_after'][1]:.3f} s after; 'full refs' = full s over their mean (compares across machines)"
    )
    typer.echo(
        f"{'command':<16}{'full s':>9}{'full cpu s':>11}{'full refs':>10}{'full RSS MiB':>13}{'full written':>14}"
        f"{'tiny s':>9}{'tiny cpu s':>11}{'tiny RSS':>9}   goal (full)"
    )
    for label, f in r["full"].items():
        t = r["tiny"][label]
        g = r["goals_full"][label]
        goal = []
        if "seconds" in g:
            goal.append(f"<= {g['seconds']} s {'met' if g['seconds_met'] else 'MISSED'}")
        goal.append(f"<= {g['rss_mib']} MiB {'met' if g['rss_met'] else 'MISSED'}")
        typer.echo(
            f"{label:<16}{f['median_s']:>9.2f}{f['median_cpu_s']:>11.2f}{f['median_s'] / ref_s:>10.1f}"
            f"{f['peak_rss_mib']:>13.0f}"
            f"{f['bytes_written'] if f['bytes_written'] is not None else '?':>14,}"
            f"{t['median_s']:>9.2f}{t['median_cpu_s']:>11.2f}{t['peak_rss_mib']:>9.0f}   {', '.join(goal)}"
        )
        for size, fig in (("full", f), ("tiny", t)):
            if fig["exit_codes"] != [0]:
                typer.echo(f"  {label} ({size}) exited {fig['exit_codes']}")
    for n in r["not_measured"]:
        typer.echo(f"not measured: {n}")
    if r["kept"]:
        typer.echo(f"kept: {r['kept']}")


def bench_full_cmd(
    workdir: Annotated[
        Optional[Path], typer.Option("--dir", help="Scratch folder (default: the system's temp folder).")
    ] = None,
    runs: Annotated[int, typer.Option("--runs", help="Runs per command and size (the median is reported).")] = 3,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the generated checkpoints and outputs.")] = False,
    fmt: FormatOpt = Format.human,
) -> None:
    """Time check/assemble/engram at full size (sparse files) beside the tiny size: seconds, CPU, RSS, bytes."""
    r = bench_full(
        workdir, runs, keep, log=(lambda m: None) if fmt is Format.json else (lambda m: typer.echo(m, err=True))
    )
    Output(fmt).result(r, human=lambda: render(r))


def register(app: typer.Typer) -> None:
    checkpoint_app.command("bench-full")(bench_full_cmd)
