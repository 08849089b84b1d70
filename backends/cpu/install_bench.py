"""uv against pip for the engine venv, measured in one run: each tool builds the local default
recipe's engine venv (requirements + uninstall list) into its own fresh temporary venv with
its own empty cache, so both download everything; prints seconds, venv bytes and cache bytes
(what was downloaded or unpacked), and whether each venv verifies (engine.check_venv).

    python -m recipekit.backends.cpu.install_bench [--tools uv,pip] [--dir DIR] [--format json]

Both read the same package sources: pip from its own configuration, uv from the same options
passed explicitly (installer.pip_sources). Slow (minutes per tool) and network-bound: run it
by hand, not in tests; the temporary folders are removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from recipekit import bounded
from recipekit.backends.cpu import engine, installer


def tree_bytes(root: Path) -> int:
    """Bytes of the regular files under root (symlinks not followed, hard links counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            try:
                st = os.lstat(os.path.join(dirpath, f))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen or not os.path.isfile(os.path.join(dirpath, f)):
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    return total


def measure_one(tool: str, base: Path, spec: engine.EngineSpec, uv: str, sources: installer.PipSources) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"engine-{tool}-", dir=base))
    venv, cache = work / spec.venv_name, work / "cache"
    cache.mkdir()
    env = {**os.environ, "PIP_CACHE_DIR": str(cache), "UV_CACHE_DIR": str(cache)}
    cmds = installer.install_commands(tool, venv, spec.requirements, spec.uninstall, uv=uv, sources=sources)
    log = work / "install.log"
    t0 = time.monotonic()
    steps = []
    rc = 0
    with open(log, "w") as lf:
        for cmd in cmds:
            s0 = time.monotonic()
            rc = subprocess.run(
                cmd, stdout=lf, stderr=subprocess.STDOUT, env=env, timeout=engine.INSTALL_TIMEOUT_S
            ).returncode
            steps.append({"cmd": " ".join(cmd[:4]) + " ...", "s": round(time.monotonic() - s0, 1), "rc": rc})
            print(f"  {tool}: {steps[-1]['cmd']} {steps[-1]['s']} s (exit {rc})", file=sys.stderr, flush=True)
            if rc != 0:
                break
    total = round(time.monotonic() - t0, 1)
    chk = engine.check_venv(venv, spec.requirements, spec.uninstall, spec.expected)
    res = {
        "tool": tool,
        "seconds": total,
        "steps": steps,
        "venv_bytes": tree_bytes(venv),
        "cache_bytes": tree_bytes(cache),
        "verifies": chk.ok,
        "problems": chk.problems,
        "versions": {k: v for k, v in chk.versions.items() if v},
    }
    if rc != 0:
        res["log_tail"] = bounded.read_tail(log, "install log", 2000).decode(errors="replace")
    shutil.rmtree(work, ignore_errors=True)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tools", default="uv,pip", help="comma-separated, in the order to run (default uv,pip)")
    ap.add_argument("--dir", type=Path, default=None, help="where the temporary venvs go (default: the temp dir)")
    ap.add_argument("--format", choices=("text", "json"), default="text")
    a = ap.parse_args(argv)
    tools = [t for t in a.tools.split(",") if t]
    if any(t not in installer.TOOLS for t in tools):
        ap.error(f"--tools takes {', '.join(installer.TOOLS)}")
    uv = installer.uv_binary() or ""
    if "uv" in tools and not uv:
        ap.error("the uv package is not installed in this venv (pip install uv)")
    spec = engine.local_default()
    sources = installer.pip_sources()
    base = a.dir or Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    print(f"engine {spec.venv_name}: {' '.join(spec.requirements)}; pip sources: {sources.options}", file=sys.stderr)
    load = os.getloadavg()
    results = [measure_one(t, base, spec, uv, sources) for t in tools]
    out = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_before": [round(x, 2) for x in load],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "results": results,
    }
    if a.format == "json":
        print(json.dumps(out, indent=2))
    else:
        print(f"{out['date']}  load {out['load_before']} -> {out['load_after']}  cpus {out['cpus']}")
        for r in results:
            ok = "verifies" if r["verifies"] else "DOES NOT VERIFY: " + "; ".join(r["problems"])
            print(
                f"{r['tool']:>4}: {r['seconds']:7.1f} s  venv {r['venv_bytes'] / 2**20:8.1f} MiB  "
                f"cache {r['cache_bytes'] / 2**20:8.1f} MiB  {ok}"
            )
        good = [r for r in results if r["verifies"]]
        if len(good) == 2:
            fast, slow = sorted(good, key=lambda r: r["seconds"])
            print(f"{fast['tool']} is {slow['seconds'] / fast['seconds']:.2f}x faster than {slow['tool']}")
    return 0 if all(r["verifies"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
