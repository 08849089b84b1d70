"""`run_doctor`: gather facts, optionally run the P2P probe, run the checks, build the report.
The apply pipeline calls this as its `doctor` step; `recipe doctor` prints the report."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from recipekit import paths
from recipekit.tools.doctor.checks import Check, run_checks
from recipekit.tools.doctor.collect import Runner, collect_facts
from recipekit.tools.doctor.facts import Facts
from recipekit.tools.doctor.report import DoctorReport
from recipekit.tools.doctor.requirements import Requirements, requirements_from
from recipekit.tools.p2p import probe as p2p

if TYPE_CHECKING:
    from recipekit.config import EffectiveConfig


def run_doctor(
    effective: EffectiveConfig | None = None,
    *,
    p2p_probe: bool = False,
    python: str | None = None,
    p2p_timeout: float = 120.0,
    p2p_refresh: bool = False,
    facts: Facts | None = None,
    runner: Runner | None = None,
    with_docker: bool = True,
    probe_kwargs: dict | None = None,
    more_checks: Sequence[Any] = (),
) -> DoctorReport:
    """Check this host against an effective config (or a Recipe), or just report facts (None).

    `facts`/`runner` are for tests and replays; `probe_kwargs` reach `run_probe` (worker,
    cpu_devices, sizes). `more_checks` are checks another domain made of the same effective config
    (the application hands in hybrid/engram/fitness.py's Engram checks): objects with id, status,
    message and hint, appended to the report."""
    req: Requirements | None = requirements_from(effective) if effective is not None else None
    if facts is None:
        model_dir = Path(req.model_dir) if req and req.model_dir else paths.models_dir()
        facts = collect_facts(
            model_dir=model_dir, ports=req.ports if req else (), runner=runner, with_docker=with_docker
        )
    probe = None
    if p2p_probe:
        probe = _probe(facts, python, p2p_timeout, p2p_refresh, probe_kwargs or {})
    verified = 0
    if effective is not None:
        try:
            from recipekit.tools.fetch import verified_bytes  # lazy: pulls pydantic

            verified = verified_bytes(effective)
        except Exception:  # a broken manifest must not break the doctor; fetch re-verifies
            verified = 0
    checks = run_checks(facts, req, probe, verified)
    checks += [Check(c.id, c.status, c.message, c.hint) for c in more_checks]
    return DoctorReport(
        facts=facts,
        checks=checks,
        recipe_id=req.recipe_id if req else None,
        layout=req.layout if req else None,
        p2p_probe=probe,
    )


def _probe(facts: Facts, python: str | None, timeout: float, refresh: bool, kwargs: dict):
    cache_dir = paths.cache_dir() / "p2p"
    # CUDA_VISIBLE_DEVICES narrows what the worker sees: then its identity phase names the GPUs
    nv = [] if os.environ.get("CUDA_VISIBLE_DEVICES") else [a for a in facts.accelerators if a.vendor == "nvidia"]
    if nv and not refresh and not kwargs:
        hit = p2p.cached_result(cache_dir, facts.driver_version, [a.uuid for a in nv])
        if hit:
            return hit
    py, info, tried = p2p.find_torch_python(python, venvs=paths.venvs_dir())
    if py is None:
        return p2p.ProbeResult(
            verdict="skipped",
            p2p_usable=False,
            reason=f"no python with torch found (tried {', '.join(tried) or 'nothing'}); pass --python",
        )
    if info is None:
        return p2p.ProbeResult(
            verdict="skipped",
            p2p_usable=False,
            python=py,
            reason=f"{py} cannot import torch; pass --python <a python with torch+CUDA>",
        )
    if not info.get("cuda") and not kwargs.get("cpu_devices"):
        return p2p.ProbeResult(
            verdict="skipped", p2p_usable=False, python=py, reason=f"torch {info.get('torch')} at {py} sees no CUDA GPU"
        )
    return p2p.run_probe(
        py,
        timeout_s=timeout,
        refresh=refresh,
        cache_dir=cache_dir,
        driver=facts.driver_version if nv else None,
        gpu_uuids=[a.uuid for a in nv if a.uuid] or None,
        **kwargs,
    )
