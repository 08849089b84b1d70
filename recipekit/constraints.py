"""Constraints: the recipe's rules, as data, evaluated on an effective config.

A constraint is `{id, reason, hint, scope, when, require}`. `when` and `require` are
conditions: a mapping of path -> test, all of which must hold. Paths:
  layout                 the selected layout name
  parallel.NAME          the declared parallelism (tensor, pipeline, data) of the layout or of the
                         multi-node layout a node belongs to: rules key on it, not on layout names
  setting.NAME           a setting's value
  env.NAME               an env knob's value (None when unset)
  arg.--flag             a serve argument: present or not; its value (JSON args: the object)
  ack.NAME               an acknowledgement ('1' when given)
  host.NAME              a host fact (scope: host; checked by the doctor / apply with facts)
  anything else          a field of the recipe document, dotted (e.g. model.config.kv_lora_rank)
Tests: equals, not_equals, in, not_in, present (true/false), gt, gte, lt, lte, matches
(regex, full match), contains (a value or list of values that must all be in a list/string).
Conditions combine with `any_of: [cond, ...]`, `all_of: [...]` and `not: cond`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional

from recipekit.errors import ErrorList, ExitCode, RecipekitError

if TYPE_CHECKING:
    from recipekit.config import EffectiveConfig

TESTS = ("equals", "not_equals", "in", "not_in", "present", "gt", "gte", "lt", "lte", "matches", "contains")
PATH_ROOTS = ("layout", "parallel", "setting", "env", "arg", "ack", "host")
PARALLEL = ("tensor", "pipeline", "data")
_MISSING = object()


@dataclass
class Violation:
    id: str
    reason: str
    hint: str
    details: str

    def error(self, location: str = "") -> RecipekitError:
        return RecipekitError(
            code=f"constraint-{self.id}",
            message=f"{self.reason} ({self.details})",
            hint=self.hint or None,
            location=location or None,
            exit_code=ExitCode.INVALID_INPUT,
        )


class _Context:
    def __init__(self, eff: EffectiveConfig, host_facts: Optional[Mapping[str, Any]]):
        self.eff = eff
        self.host = dict(host_facts or {})
        self._doc: Optional[dict[str, Any]] = None

    def lookup(self, path: str) -> Any:
        eff = self.eff
        if path == "layout":
            return eff.layout
        root, _, rest = path.partition(".")
        if root == "parallel":
            return eff.declared_parallel(rest) if rest in PARALLEL else _MISSING
        if root == "setting":
            return eff.setting(rest, _MISSING)
        if root == "env":
            return eff.env_value(rest)
        if root == "arg":
            a = eff.arg(rest)
            return _MISSING if a is None else a.value
        if root == "ack":
            v = eff.acks.get(rest)
            return None if v is None else v.value
        if root == "host":
            return self.host.get(rest, _MISSING)
        if self._doc is None:
            self._doc = eff.recipe.model_dump(mode="json", by_alias=True)
        cur: Any = self._doc
        for part in path.split("."):
            if isinstance(cur, dict) and part in cur:
                cur = cur[part]
            else:
                return _MISSING
        return cur


def _num(v: Any) -> Optional[float]:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _test(value: Any, test: Mapping[str, Any], path: str) -> tuple[bool, str]:
    present = value is not _MISSING and value is not None
    shown = "unset" if not present else (value if not isinstance(value, str) else repr(value))
    if path.startswith("arg.") and value is None:
        present, shown = True, "present"  # a bare flag is present with no value
    for op, want in test.items():
        if op == "present":
            ok = present == bool(want)
        elif op in ("equals", "not_equals"):
            eq = present and (value == want or str(value) == str(want))
            ok = eq if op == "equals" else not eq
        elif op in ("in", "not_in"):
            isin = present and (value in want or str(value) in [str(w) for w in want])
            if not present and op == "in":
                isin = None in want or "" in want
            ok = isin if op == "in" else not isin
        elif op in ("gt", "gte", "lt", "lte"):
            a, b = _num(value), _num(want)
            if a is None or b is None:
                ok = op in ("lt", "lte") and not present  # an absent value is below any bound
            else:
                ok = {"gt": a > b, "gte": a >= b, "lt": a < b, "lte": a <= b}[op]
        elif op == "matches":
            ok = present and re.fullmatch(str(want), str(value)) is not None
        elif op == "contains":
            items = want if isinstance(want, list) else [want]
            if not present:
                ok = False
            elif isinstance(value, list):
                ok = all(i in value or str(i) in [str(x) for x in value] for i in items)
            else:
                ok = all(str(i) in str(value) for i in items)
        else:
            raise RecipekitError(
                code="constraint-bad-test", message=f"unknown test '{op}' at {path}", hint=f"tests: {', '.join(TESTS)}"
            )
        if not ok:
            return False, f"{path} is {shown}, needs {op} {want}"
    return True, ""


def _holds(cond: Mapping[str, Any], ctx: _Context) -> tuple[bool, str]:
    for key, test in cond.items():
        if key == "any_of":
            results = [_holds(c, ctx) for c in test]
            if not any(ok for ok, _ in results):
                return False, " or ".join(msg for _, msg in results)
        elif key == "all_of":
            for c in test:
                ok, msg = _holds(c, ctx)
                if not ok:
                    return False, msg
        elif key == "not":
            ok, _ = _holds(test, ctx)
            if ok:
                return False, f"not({test}) does not hold"
        else:
            ok, msg = _test(ctx.lookup(key), test, key)
            if not ok:
                return False, msg
    return True, ""


def check(
    eff: EffectiveConfig, host_facts: Optional[Mapping[str, Any]] = None, scopes: tuple[str, ...] = ("config",)
) -> list[Violation]:
    """Violations of the recipe's constraints (host-scope rules only when host facts are given)."""
    ctx = _Context(eff, host_facts)
    out = []
    problems = [
        p
        for i, c in enumerate(eff.recipe.constraints)
        for part, cond in (("when", c.when), ("require", c.require))
        if cond is not None
        for p in validate_rule(cond, f"$.constraints[{i}].{part}")
    ]
    if problems:
        raise ErrorList(
            [
                RecipekitError(code="bad-constraint", message=p, hint="fix the rule's data in the recipe")
                for p in problems
            ]
        )
    for c in eff.recipe.constraints:
        if c.scope not in scopes:
            continue
        if c.scope == "host" and host_facts is None:
            continue
        if c.when is not None:
            applies, _ = _holds(c.when, ctx)
            if not applies:
                continue
        ok, msg = _holds(c.require, ctx)
        if not ok:
            out.append(Violation(c.id, c.reason, c.hint, msg))
    return out


def enforce(
    eff: EffectiveConfig, host_facts: Optional[Mapping[str, Any]] = None, scopes: tuple[str, ...] = ("config",)
) -> None:
    """Raise ErrorList (exit 2) naming each violated constraint by id."""
    violations = check(eff, host_facts, scopes)
    if violations:
        where = eff.recipe.id + (f" layout {eff.layout}" if eff.layout else "")
        raise ErrorList([v.error(where) for v in violations])


def validate_rule(cond: Any, where: str) -> list[str]:
    """Static problems of a condition (unknown tests or path roots) for lint."""
    problems: list[str] = []
    if not isinstance(cond, Mapping):
        return [f"{where}: a condition must be a mapping"]
    for key, test in cond.items():
        if key in ("any_of", "all_of"):
            if not isinstance(test, list):
                problems.append(f"{where}.{key}: must be a list of conditions")
                continue
            for i, c in enumerate(test):
                problems += validate_rule(c, f"{where}.{key}[{i}]")
        elif key == "not":
            problems += validate_rule(test, f"{where}.not")
        else:
            if key.startswith("parallel.") and key.partition(".")[2] not in PARALLEL:
                problems.append(f"{where}.{key}: parallel.* is one of {', '.join(PARALLEL)}")
            if not isinstance(test, Mapping) or not test:
                problems.append(f"{where}.{key}: a test must be a mapping like {{equals: x}}")
                continue
            for op, want in test.items():
                if op not in TESTS:
                    problems.append(f"{where}.{key}: unknown test '{op}'")
                else:
                    problems += _bad_test_data(op, want, f"{where}.{key}.{op}")
    return problems


def _bad_test_data(op: str, want: Any, where: str) -> list[str]:
    """Problems of a test's operand: the data each test needs (render refuses what lint refuses)."""
    scalar = (str, int, float, bool, type(None))
    if op == "matches":
        if not isinstance(want, str):
            return [f"{where}: needs a regular expression string, got {type(want).__name__}"]
        try:
            re.compile(want)
        except (re.error, RecursionError, OverflowError) as e:
            return [f"{where}: invalid regular expression: {e}"]
    elif op in ("in", "not_in"):
        if not isinstance(want, list) or not all(isinstance(w, scalar) for w in want):
            return [f"{where}: needs a list of plain values"]
    elif op in ("gt", "gte", "lt", "lte"):
        if isinstance(want, bool) or _num(want) is None or _num(want) != _num(want):
            return [f"{where}: needs a number, got {type(want).__name__}"]
    elif op == "present":
        if not isinstance(want, bool):
            return [f"{where}: needs true or false"]
    elif op in ("equals", "not_equals"):
        if not isinstance(want, scalar):
            return [f"{where}: needs a plain value"]
    elif op == "contains":
        if not isinstance(want, scalar) and not (isinstance(want, list) and all(isinstance(w, scalar) for w in want)):
            return [f"{where}: needs a plain value or a list of them"]
    return []
