"""Run with an engine venv's python (not the toolkit's): prints, as JSON, every `vllm serve`
flag from vLLM's own argument parser and every env name from `vllm.envs`.

Standalone on purpose: it imports only vLLM and the standard library.
"""
import argparse
import json
import sys


def main() -> int:
    import vllm.envs as envs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    from vllm.version import __version__

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    deprecated = getattr(parser, "_deprecated", set())
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
    json.dump({"version": __version__, "flags": flags, "positionals": positionals,
               "env": sorted(envs.environment_variables)}, sys.stdout, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
