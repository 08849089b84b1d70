"""A server that dies at start-up: the error names this run's cause first, then this run's log lines."""

from __future__ import annotations

from recipekit.apply.ready import RUN_MARK, cause_line, this_run

EARLIER = [
    f"{RUN_MARK}2026-12-01T10:00:00Z: vllm serve /m --max-model-len 100000",
    "Traceback (most recent call last):",
    '  File "/v/lib/python3.11/site-packages/vllm/config/model.py", line 1, in __post_init__',
    "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
]
THIS = [
    f"{RUN_MARK}2026-12-01T11:00:00Z: vllm serve /m --max-num-seqz 4",
    "INFO 12-01 11:00:03 [__init__.py:216] Automatically detected platform cpu.",
    "usage: vllm serve [model_tag] [options]",
    "vllm serve: error: unrecognized arguments: --max-num-seqz 4",
]


def test_only_the_lines_after_the_last_start_mark_belong_to_this_run():
    assert this_run(EARLIER + THIS) == THIS[1:]
    assert this_run(THIS[1:]) == THIS[1:]  # no mark in the tail: all of it is this run's


def test_the_cause_is_the_engines_own_error_line_not_an_earlier_runs_traceback():
    assert cause_line(this_run(EARLIER + THIS)) == "vllm serve: error: unrecognized arguments: --max-num-seqz 4"
    assert cause_line(EARLIER[1:]).startswith("pydantic_core._pydantic_core.ValidationError: 1 validation error")
    assert cause_line(["INFO starting", "INFO done"]) == ""


def test_the_error_prints_real_lines_with_the_cause_first(capsys):
    from recipekit.cli.dispatch import _print
    from recipekit.errors import ExitCode, RecipekitError

    lines = this_run(EARLIER + THIS)
    e = RecipekitError(
        code="server-died",
        exit_code=ExitCode.FAILURE,
        message=f"the server exited during start-up: {cause_line(lines)}",
        details=[f"last {len(lines)} lines of this run's log:", *("| " + x for x in lines)],
    )
    _print(e)
    err = capsys.readouterr().err.splitlines()
    assert (
        err[0]
        == "error[server-died] the server exited during start-up: vllm serve: error: unrecognized arguments: --max-num-seqz 4"
    )
    assert err[1:] == ["  last 3 lines of this run's log:", *("  | " + x for x in THIS[1:])]
    assert not any("\\x0a" in x or "Traceback" in x for x in err)
