"""Safe parsing of the YAML (and JSON) documents the toolkit reads, with a line for every JSON path.

Recipes, layouts and patch packs' pack.yaml all go through parse_yaml. Only plain data is accepted: PyYAML's safe constructor (python tags are refused), no
duplicate keys, no anchors/aliases (no expansion bombs), a size cap. Every problem becomes a
RecipekitError naming file:line.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from recipekit.errors import ErrorList, RecipekitError

MAX_BYTES = 2 * 1024 * 1024


def _err(code: str, msg: str, origin: str, line: int | None, hint: str | None = None) -> RecipekitError:
    where = f"{origin}:{line}" if line else origin
    return RecipekitError(code=code, message=msg, hint=hint, location=where)


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys."""

    def construct_mapping(self, node, deep=False):  # noqa: D401 - PyYAML hook
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise _YamlProblem("yaml-bad-key", "mapping keys must be plain scalars", key_node.start_mark.line + 1)
            if key in seen:
                raise _YamlProblem(
                    "duplicate-key",
                    f"key '{key}' appears twice (first at line {seen[key]})",
                    key_node.start_mark.line + 1,
                    "remove one of them",
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


class _YamlProblem(Exception):
    def __init__(self, code: str, msg: str, line: int | None, hint: str | None = None):
        super().__init__(msg)
        self.code, self.msg, self.line, self.hint = code, msg, line, hint


# the tags plain data resolves to; !!binary, !!set, !!omap, !!pairs and local !tags are refused
PLAIN_TAGS = frozenset(
    "tag:yaml.org,2002:" + t for t in ("str", "int", "float", "bool", "null", "seq", "map", "timestamp")
)


def _walk_lines(node: yaml.Node, path: str, lines: dict[str, int], seen: set[int], what: str) -> None:
    if id(node) in seen:
        raise _YamlProblem(
            "yaml-alias",
            f"anchors and aliases are not allowed in {what}s",
            node.start_mark.line + 1,
            "write the value out where it is used",
        )
    if node.tag not in PLAIN_TAGS:
        raise _YamlProblem(
            "yaml-unsafe-tag",
            f"tag {node.tag} is not allowed: recipes are plain data",
            node.start_mark.line + 1,
            "remove the !!tag; only strings, numbers, booleans, lists and mappings",
        )
    seen.add(id(node))
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else "?"
            _walk_lines(v, f"{path}.{key}", lines, seen, what)
            lines.setdefault(f"{path}.{key}", k.start_mark.line + 1)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _walk_lines(v, f"{path}[{i}]", lines, seen, what)


MAX_FLOW_DEPTH = 64
_QUOTED = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'')
_BRACKET = re.compile(r"[\[\]{}]")


def _flow_depth(text: str) -> int:
    """How deep `[`/`{` nest outside quoted scalars (a cheap upper bound, checked before PyYAML's
    scanner, whose time grows with the square of the flow depth)."""
    depth = deepest = 0
    for m in _BRACKET.finditer(_QUOTED.sub("", text)):
        depth = depth + 1 if m.group(0) in "[{" else max(depth - 1, 0)
        deepest = max(deepest, depth)
    return deepest


def parse_yaml(text: str, origin: str, what: str = "recipe") -> tuple[Any, dict[str, int]]:
    """Parse YAML text into plain data and a map of JSON path ('$.a.b[0]') -> line.

    `what` names the kind of document in the messages ("recipe", "patch pack", ...).
    """
    if len(text.encode("utf-8", "replace")) > MAX_BYTES:
        raise _err("file-too-large", f"{what} larger than {MAX_BYTES} bytes", origin, None)
    if _flow_depth(text) > MAX_FLOW_DEPTH:
        raise _err(
            "yaml-too-deep",
            f"the document nests [ ] / {{ }} more than {MAX_FLOW_DEPTH} deep",
            origin,
            None,
            f"{what}s are a few levels deep; this is not a {what}",
        )
    try:
        loader = _Loader(text)
    except yaml.YAMLError as e:  # the reader refuses control characters up front
        raise _err(
            "yaml-syntax", f"invalid YAML: {str(e).splitlines()[0]}", origin, None, "remove control characters"
        ) from None
    try:
        node = loader.get_single_node()
        if node is None:
            raise _err(f"empty-{what.replace(' ', '-')}", "the document is empty", origin, 1)
        lines: dict[str, int] = {}
        _walk_lines(node, "$", lines, set(), what)
        data = loader.construct_document(node)
    except _YamlProblem as p:
        raise _err(p.code, p.msg, origin, p.line, p.hint) from None
    except yaml.constructor.ConstructorError as e:
        line = e.problem_mark.line + 1 if e.problem_mark else None
        tag = ""
        if e.problem and "tag" in e.problem:
            tag = e.problem.split("tag", 1)[1].strip()
        raise _err(
            "yaml-unsafe-tag",
            f"tag {tag or '(unknown)'} is not allowed: {what}s are plain data",
            origin,
            line,
            "remove the !!tag; only strings, numbers, booleans, lists and mappings",
        ) from None
    except RecursionError:
        raise _err(
            "yaml-too-deep",
            "the document nests too deeply",
            origin,
            None,
            "recipes are a few levels deep; this is not a recipe",
        ) from None
    except ValueError as e:  # an integer with more digits than Python converts
        raise _err("yaml-value-invalid", f"a value cannot be read: {str(e)[:120]}", origin, None) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else None
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise _err("yaml-syntax", f"invalid YAML: {problem}", origin, line, "check indentation and quoting") from None
    finally:
        loader.dispose()
    return data, lines


def parse_json(text: str, origin: str) -> tuple[Any, dict[str, int]]:
    """Parse JSON text, refusing duplicate keys. JSON paths carry no line numbers."""
    if len(text.encode("utf-8", "replace")) > MAX_BYTES:
        raise _err("file-too-large", f"recipe larger than {MAX_BYTES} bytes", origin, None)
    if _flow_depth(text) > MAX_FLOW_DEPTH:  # whatever the interpreter's recursion limit is
        raise _err("json-too-deep", f"the document nests [ ] / {{ }} more than {MAX_FLOW_DEPTH} deep", origin, None)

    def pairs(items):
        out = {}
        for k, v in items:
            if k in out:
                raise _YamlProblem("duplicate-key", f"key '{k}' appears twice", None, "remove one of them")
            out[k] = v
        return out

    try:
        return json.loads(text, object_pairs_hook=pairs), {}
    except _YamlProblem as p:
        raise _err(p.code, p.msg, origin, None, p.hint) from None
    except json.JSONDecodeError as e:
        raise _err("json-syntax", f"invalid JSON: {e.msg}", origin, e.lineno) from None
    except RecursionError:
        raise _err("json-too-deep", "the document nests too deeply", origin, None) from None
    except ValueError as e:  # an integer with more digits than Python converts
        raise _err("json-value-invalid", f"a value cannot be read: {str(e)[:120]}", origin, None) from None


def parse_document(text: str, origin: str) -> tuple[Any, dict[str, int]]:
    """JSON when it looks like JSON (or the name says .json), YAML otherwise."""
    if origin.endswith(".json") or text.lstrip().startswith("{"):
        return parse_json(text, origin)
    return parse_yaml(text, origin)


__all__ = ["parse_yaml", "parse_json", "parse_document", "ErrorList", "MAX_BYTES"]
