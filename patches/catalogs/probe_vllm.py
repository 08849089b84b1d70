"""Run with an engine venv's python (not the toolkit's): prints, as JSON, every `vllm serve`
flag from vLLM's own argument parser and every env name from `vllm.envs`.

Standalone on purpose: it imports only vLLM and the standard library.

`make_arg_parser` lives in `vllm.entrypoints.common.cli_args` from vLLM 0.33.0 and in
`vllm.entrypoints.launchers.cli_args` before (0.32.0): the new home is tried first.
"""

import argparse
import importlib
import json
import sys
from typing import Callable

CLI_ARGS_MODULES = (
    "vllm.entrypoints.common.cli_args",  # vLLM >= 0.33.0
    "vllm.entrypoints.launchers.cli_args",
)  # vLLM 0.32.0


def find_make_arg_parser() -> tuple[str, Callable]:
    """(module name, `make_arg_parser`) from the first of CLI_ARGS_MODULES that this vLLM has."""
    for name in CLI_ARGS_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            # only "this module does not exist here" moves on; a broken import inside it is an error
            if e.name is None or not (name == e.name or name.startswith(e.name + ".")):
                raise
            continue
        return name, module.make_arg_parser
    raise ModuleNotFoundError(f"none of {', '.join(CLI_ARGS_MODULES)} is in this vLLM")


def main() -> int:
    import vllm.envs as envs  # lazy: pulls vllm
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # lazy: pulls vllm
    from vllm.version import __version__  # lazy: pulls vllm

    cli_args_module, make_arg_parser = find_make_arg_parser()
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    deprecated: set[str] = getattr(parser, "_deprecated", set())
    flags = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        for opt in action.option_strings:
            flags[opt] = {
                "dest": action.dest,
                "takes_value": action.nargs != 0,
                "deprecated": action in deprecated,
                "choices": sorted(map(str, action.choices)) if action.choices and len(action.choices) < 64 else None,
            }
    positionals = [a.dest for a in parser._actions if not a.option_strings]
    json.dump(
        {
            "version": __version__,
            "flags": flags,
            "positionals": positionals,
            "cli_args_module": cli_args_module,
            "env": sorted(envs.environment_variables),
        },
        sys.stdout,
        indent=1,
        sort_keys=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
