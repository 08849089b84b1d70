"""`recipe oracle run | capture | paired`: the fp32 DeepSeek-V4.1 reference forward, a server's
prompt log-probs captured into the same reference format, and paired NLL between two references.

Thin: options here, work in recipekit.bench.oracle (imported inside the commands, so that
`recipe --help` never imports torch).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from recipekit import bounded
from recipekit.atomic import atomic_write_text
from recipekit.bench.gates.paired_nll import describe, paired_nll
from recipekit.bench.oracle.numerics import Numerics
from recipekit.bounded import read_text
from recipekit.cli import oracle_decoders
from recipekit.cli.help import new_group
from recipekit.cli.options import EnvFileOpt, FormatOpt, LayoutOpt, NodeOpt, OldLayoutOpt, SetOpt, refuse_old_layout
from recipekit.errors import RecipekitError
from recipekit.output import Format, Output

DecodersOpt = Annotated[
    str,
    typer.Option(
        "--decoders",
        help="Device decoders of the streamed weights: auto (sm_80 Triton kernels on CUDA when Triton imports, "
        "else the torch ops) | sm80 | torch. Checked against the codecs on the device before the run.",
    ),
]


def register(app: typer.Typer) -> None:
    grp = new_group("The fp32 DeepSeek-V4.1 oracle: reference log-probs for the perplexity gate, paired NLL.")
    app.add_typer(grp, name="oracle")

    @grp.command("run")
    def run_cmd(
        checkpoint: Annotated[
            Path, typer.Option("--checkpoint", "-c", help="DSV4.1 checkpoint folder (original or Gaudi layout).")
        ],
        out: Annotated[Path, typer.Option("--out", "-o", help="Reference file to write (JSON).")],
        checkpoint_format: Annotated[
            str | None,
            typer.Option("--checkpoint-format", help="original | gaudi (default: from config.json)."),
        ] = None,
        old_layout: OldLayoutOpt = None,
        prompts: Annotated[
            Path | None, typer.Option("--prompts", help='Prompt set: JSON {"prompts": [[ids...], ...]}.')
        ] = None,
        text: Annotated[
            Path | None,
            typer.Option(
                "--text",
                help="A text file tokenized with the checkpoint's tokenizer (default: the pinned perplexity text).",
            ),
        ] = None,
        tokens: Annotated[
            int, typer.Option("--tokens", help="Tokens of --text to score (the gate's `tokens`).")
        ] = 1536,
        device: Annotated[str, typer.Option("--device", help="cpu | cuda.")] = "cpu",
        threads: Annotated[int | None, typer.Option("--threads", help="torch CPU threads (recorded).")] = None,
        act_quant: Annotated[
            bool,
            typer.Option(
                "--act-quant/--no-act-quant", help="FP8-quantize activations before FP8/FP4 linears (vendor act_quant)."
            ),
        ] = False,
        kv_fp8: Annotated[bool, typer.Option("--kv-fp8/--no-kv-fp8", help="FP8-round the window KV latent.")] = False,
        topk_ties: Annotated[str, typer.Option("--topk-ties", help="lower-index | higher-index.")] = "lower-index",
        select_f64: Annotated[
            bool,
            typer.Option(
                "--select-f64/--no-select-f64", help="Accumulate indexer and router selection scores in float64."
            ),
        ] = False,
        dtype: Annotated[
            str,
            typer.Option(
                "--dtype", help="float32 (the oracle) | float64 (the same model in double: fp32's rounding yardstick)."
            ),
        ] = "float32",
        decoders: DecodersOpt = "auto",
        format: FormatOpt = Format.human,
    ) -> None:
        """Full-vocabulary log-probs of every prompt token (fp32 prefill forward; DSpark and vision out of scope)."""

        refuse_old_layout(old_layout)
        o = Output(format)
        from recipekit.bench.oracle import run as orun  # lazy: pulls pydantic

        if prompts and text:
            raise RecipekitError(
                code="oracle-bad-option", message="--prompts and --text exclude each other", hint="pass one prompt set"
            )
        if device not in ("cpu", "cuda") and not (device.startswith("cuda:") and device[5:].isdigit()):
            raise RecipekitError(
                code="oracle-bad-option", message=f"device {device!r} is not cpu or cuda", hint="--device cpu | cuda"
            )
        if dtype not in ("float32", "float64"):
            raise RecipekitError(
                code="oracle-bad-option", message=f"dtype {dtype!r} is not float32 or float64", hint="--dtype float32"
            )
        if tokens < 2:
            raise RecipekitError(
                code="oracle-bad-option",
                message=f"--tokens {tokens}: a log-prob needs a token before it, so 2 or more",
                hint="--tokens 1536 (the gate's default)",
            )
        if threads is not None and threads < 1:
            raise RecipekitError(
                code="oracle-bad-option", message=f"--threads {threads} is not a positive count", hint="--threads 8"
            )
        orun.require_torch(device)
        dec, dec_why = oracle_decoders.for_device(device, decoders)

        if prompts:
            ps, source = orun.load_prompts(str(prompts)), str(prompts)
        else:
            if text:
                body = bounded.read_text(text, "text file", 256 * 1024 * 1024, code="oracle-text-unreadable")
                source = str(text)
            else:
                from recipekit.bench.gates.perplexity import ppl_text  # lazy: pulls aiohttp

                body, source = ppl_text(), "bench/prompts/ppl.txt"
            ps = [orun.tokenize_text(str(checkpoint), body, tokens)]
        doc = orun.run_oracle(
            str(checkpoint),
            ps,
            checkpoint_format,
            device,
            Numerics(act_quant, kv_fp8, topk_ties, select_f64),
            threads,
            source,
            progress=o.progress(),
            dtype=dtype,
            decoders=dec,
        )
        orun.write_reference(doc, str(out))
        m = doc["measured"]
        o.result(
            {k: v for k, v in doc.items() if k != "results"} | {"out": str(out), "decoders_why": dec_why},
            human=lambda: typer.echo(
                f"wrote {out}: {doc['scored_tokens']} tokens scored, ppl {doc['ppl']:.4f} "
                f"(nll {doc['nll_mean']:.5f}); {m['tokens_per_s']} tok/s, "
                f"peak RSS {m['peak_rss_bytes'] / 2**20:.0f} MiB, "
                f"{m['bytes_read'] / 2**20:.1f} MiB read; {doc['device']}, torch {doc['torch']}, "
                f"decoders {doc['decoders']}"
            ),
        )

    @grp.command("measure")
    def measure_cmd(
        checkpoint: Annotated[Path, typer.Option("--checkpoint", "-c", help="DSV4.1 checkpoint folder.")],
        device: Annotated[str, typer.Option("--device", help="cpu | cuda.")] = "cpu",
        tokens: Annotated[int, typer.Option("--tokens", help="Tokens of the pinned text the forward scores.")] = 256,
        threads: Annotated[int | None, typer.Option("--threads", help="torch CPU threads (recorded).")] = None,
        forward: Annotated[bool, typer.Option("--forward/--no-forward", help="The forward in a child.")] = True,
        reader: Annotated[bool, typer.Option("--reader/--no-reader", help="The reader's throughput.")] = True,
        stream: Annotated[
            bool, typer.Option("--stream/--no-stream", help="The streaming path on --device vs sequential read.")
        ] = False,
        json_out: Annotated[Path | None, typer.Option("--json", help="Also write the figures here (JSON).")] = None,
        decoders: DecodersOpt = "auto",
        format: FormatOpt = Format.human,
    ) -> None:
        """The oracle's figures (python -m recipekit.bench.oracle.measure) with the device decoders picked here."""
        from recipekit.bench.oracle import measure  # lazy: pulls numpy
        from recipekit.bench.oracle.run import require_torch  # lazy: pulls pydantic

        if device not in ("cpu", "cuda") and not (device.startswith("cuda:") and device[5:].isdigit()):
            raise RecipekitError(
                code="oracle-bad-option", message=f"device {device!r} is not cpu or cuda", hint="--device cpu | cuda"
            )
        if tokens < 2:
            raise RecipekitError(code="oracle-bad-option", message=f"--tokens {tokens}: 2 or more", hint="--tokens 256")
        require_torch(device)
        dec, why = oracle_decoders.for_device(device, decoders)
        fig = measure.measure(str(checkpoint), tokens, device, threads, reader, forward, stream, dec)
        fig = {"decoders": dec.name, "decoders_why": why} | fig
        if json_out:
            atomic_write_text(json_out, json.dumps(fig, indent=1) + "\n")
        Output(format).result(
            fig, human=lambda: typer.echo("\n".join([f"decoders: {dec.name} ({why})", *measure.figure_lines(fig)]))
        )

    @grp.command("capture")
    def capture_cmd(
        out: Annotated[Path, typer.Option("--out", "-o", help="Reference file to write (JSON).")],
        base_url: Annotated[
            str | None,
            typer.Option("--base-url", "--url", help="The server (default: the --recipe deployment's server)."),
        ] = None,
        recipe: Annotated[
            str | None,
            typer.Option("--recipe", "-r", help="Capture from this recipe's server (as bench/gate find it)."),
        ] = None,
        layout: LayoutOpt = None,
        node: NodeOpt = None,
        set_: SetOpt = None,
        env_file: EnvFileOpt = None,
        model: Annotated[str | None, typer.Option("--model", help="Served model name (default: the first).")] = None,
        prompts: Annotated[
            Path | None, typer.Option("--prompts", help='Prompt set: JSON {"prompts": [[ids...], ...]}.')
        ] = None,
        text: Annotated[
            Path | None,
            typer.Option("--text", help="A text file tokenized by the server's /tokenize (default: the pinned text)."),
        ] = None,
        tokens: Annotated[int, typer.Option("--tokens", help="Tokens of --text to score.")] = 1536,
        timeout: Annotated[float, typer.Option("--timeout", help="Seconds one prompt's request may take.")] = 300.0,
        format: FormatOpt = Format.human,
    ) -> None:
        """A server's prompt log-probs (vLLM prompt_logprobs) as a reference file for the gate and `paired`."""
        from recipekit.bench.oracle.capture import capture_reference  # lazy: pulls aiohttp
        from recipekit.bench.oracle.run import load_prompts, write_reference  # lazy: pulls pydantic

        if prompts and text:
            raise RecipekitError(
                code="oracle-bad-option", message="--prompts and --text exclude each other", hint="pass one prompt set"
            )
        from recipekit.cli.common import deployment_and_url  # lazy: pulls pydantic

        _, base_url = deployment_and_url(recipe, base_url, layout, node, set_, env_file)
        if not base_url:
            raise RecipekitError(
                code="no-target",
                message="name a recipe (--recipe) or pass --url",
                hint="e.g. `recipe oracle capture --recipe tiny-deepseek-cpu -o ref.json`",
            )
        if not timeout > 0 or tokens < 2:
            raise RecipekitError(
                code="oracle-bad-option",
                message="--timeout must be > 0 and --tokens >= 2",
                hint="--timeout 300 --tokens 1536",
            )
        if prompts:
            doc = capture_reference(base_url, load_prompts(str(prompts)), model, source=str(prompts), timeout=timeout)
        else:
            if text:
                body, source = read_text(text, "text file", 64 * 2**20, code="oracle-text-invalid"), str(text)
            else:
                from recipekit.bench.gates.perplexity import ppl_text  # lazy: pulls aiohttp

                body, source = ppl_text(), "bench/prompts/ppl.txt"
            doc = capture_reference(base_url, None, model, body, tokens, source, timeout)
        write_reference(doc, str(out))
        Output(format).result(
            {k: v for k, v in doc.items() if k != "results"} | {"out": str(out)},
            human=lambda: typer.echo(
                f"wrote {out}: {doc['scored_tokens']} tokens from {doc['server']['model']} at "
                f"{doc['server']['base_url']}, ppl {doc['ppl']:.4f} (nll {doc['nll_mean']:.5f})"
            ),
        )

    @grp.command("paired")
    def paired_cmd(
        a: Annotated[Path, typer.Argument(help="Reference file A (the baseline).")],
        b: Annotated[Path, typer.Argument(help="Reference file B (compared with A).")],
        format: FormatOpt = Format.human,
    ) -> None:
        """Paired NLL of B vs A on the same tokens, with its standard error."""
        from recipekit.bench.oracle.run import load_reference  # lazy: pulls pydantic

        ra, rb = load_reference(str(a)), load_reference(str(b))
        if ra["prompt_set"]["sha256"] != rb["prompt_set"]["sha256"]:
            raise RecipekitError(
                code="paired-different-tokens",
                message="the two references score different prompt sets",
                hint="make both from the same --prompts / --text and --tokens",
            )
        la = [x for r in ra["results"] for x in r["logprobs"]]
        lb = [x for r in rb["results"] for x in r["logprobs"]]
        try:
            p = paired_nll(la, lb)
        except ValueError as e:
            raise RecipekitError(
                code="paired-too-few-tokens", message=str(e), hint="score 3 or more tokens in both references"
            ) from None
        Output(format).result(p, human=lambda: typer.echo(describe(p)))
