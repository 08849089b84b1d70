"""Tensors that the hybrid's linked files expose but its index does not map, and the skip rule for them.

vLLM's weight iterator reads every tensor of every file it opens (it filters files, not tensors;
research/consumers.md §2): the official shards linked into the hybrid still hold the backbone's
MXFP4 routed experts, which the index maps to the EXL3 pack instead. Reaching the vllm-exl3
plugin's per-expert loader they raise "has no parameter 'w13_weight'". The sm_80 overlay skips
tensors whose names match `DSV41_SKIP_WEIGHT_RE` (zebgop-ops/dsv41reap-pp:overlay/patch_weight_iter.py).
"""

from __future__ import annotations

import hashlib
import itertools
import operator
import re
from typing import Callable, Collection, Iterable, Mapping

SKIP_SETTING = "DSV41_SKIP_WEIGHT_RE"
SKIP_SOURCE = "zebgop-ops/dsv41reap-pp:overlay/patch_weight_iter.py"
ROUTED_NAME_RE = re.compile(r"^layers\.(\d+)\.ffn\.experts\.\d+\.w[123]\.(weight|scale)$")
# ROUTED_NAME_RE (and skip_candidate's names, with [0-9]) over names joined by and framed in newlines:
# the layer of each line that matches; the leading literal newline lets the scan skip other lines fast
_ROUTED_NAME_NL_RE = re.compile(r"\nlayers\.(\d+)\.ffn\.experts\.\d+\.w[123]\.(?:weight|scale)(?=\n)")
_CANDIDATE_NL_RE = re.compile(r"\nlayers\.(\d+)\.ffn\.experts\.[0-9]+\.w[123]\.(?:weight|scale)(?=\n)")


def unmapped_tensors(
    file_tensors: Mapping[str, Collection[str]], weight_map: dict[str, str], indexed: Mapping[str, int] | None = None
) -> set[str]:
    """Names in the linked files' headers that the index maps to no file or to another file
    (per file, by whole columns: the names whose index entry differs from the file).

    `indexed`: per file, how many names the index maps to it, where the caller has proven that
    every one of them is in that file's header: a file holding no more names than that (a header
    names each tensor once) has none unmapped, and its names are not looked up."""
    out: set[str] = set()
    for rel, names in file_tensors.items():
        if indexed is not None and len(names) == indexed.get(rel):
            continue
        names = list(names)
        out.update(itertools.compress(names, map(operator.ne, map(weight_map.get, names), itertools.repeat(rel))))
    return out


def names_digest(names: set[str]) -> str:
    return hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()


def _alternation(nums: list[int]) -> str:
    return nums and "(" + "|".join(str(n) for n in sorted(nums)) + ")" or "()"


def skip_regex(
    unmapped: set[str], all_names: set[str] | Callable[[], set[str]], mapped: Iterable[str] | None = None
) -> str:
    """A regex matching exactly `unmapped` among `all_names`: routed experts of the layers they come
    from when that is exact, else an explicit alternation of the names. `all_names` may be a callable
    that builds the set, called only if needed: with `mapped` (the indexed names, where the caller
    proved the linked files hold exactly those and the unmapped ones) skip_rule_exact decides first."""
    if not unmapped:
        return r"^$"
    layers: set[int] = set()
    joined = _framed(unmapped)
    found = _ROUTED_NAME_NL_RE.findall(joined) if joined is not None else []
    del joined
    if len(found) == len(unmapped):  # every name a routed expert's weight or scale (ROUTED_NAME_RE)
        layers = set(map(int, set(found)))
    else:
        for n in unmapped:
            m = ROUTED_NAME_RE.match(n)
            if m is None:
                layers = set()
                break
            layers.add(int(m.group(1)))
    if layers:
        cand = skip_candidate(layers)
        if mapped is not None and skip_rule_exact(cand, unmapped, mapped):
            return cand
        if verify_skip_regex(cand, all_names() if callable(all_names) else all_names, unmapped) is None:
            return cand
    return "^(" + "|".join(re.escape(n) for n in sorted(unmapped)) + ")$"


def skip_candidate(layers: Iterable[int]) -> str:
    """The skip rule for the routed experts' weights and scales of `layers`."""
    return rf"^layers\.{_alternation(sorted(layers))}\.ffn\.experts\.[0-9]+\.w[123]\.(weight|scale)$"


_CAND_HEAD = "^layers\\.("  # skip_candidate's text around its layers
_CAND_TAIL = ")\\.ffn\\.experts\\.[0-9]+\\.w[123]\\.(weight|scale)$"


def _framed(names: Iterable[str]) -> str | None:
    """The names joined by and framed in newlines (one string), or None if a name holds one."""
    names = list(names)
    joined = "\n".join(itertools.chain(("",), names, ("",)))
    return joined if joined.count("\n") == len(names) + 1 else None


def _candidate_count(regex: str, names: Iterable[str]) -> int | None:
    """How many of `names` the rule finds (re.search), for a rule skip_candidate wrote (anchored,
    nothing in it matches a line break) and names without a line break: one regex call over all
    names, by lines; None for any other rule or names."""
    mid = (
        regex[len(_CAND_HEAD) : -len(_CAND_TAIL)] if regex.startswith(_CAND_HEAD) and regex.endswith(_CAND_TAIL) else ""
    )
    parts = mid.split("|")
    if not (mid and all(p.isascii() and p.isdigit() for p in parts) and skip_candidate(map(int, parts)) == regex):
        return None
    joined = _framed(names)
    if joined is None:
        return None
    wanted = set(parts)  # the alternation matches exactly these strings as a line's layer
    return sum(map(wanted.__contains__, _CANDIDATE_NL_RE.findall(joined)))


def skip_rule_exact(regex: str, unmapped: set[str], mapped: Iterable[str]) -> bool:
    """True when `regex`, a rule skip_candidate wrote, matches every unmapped name and none of `mapped`:
    where the linked files hold exactly the names of those two, verify_skip_regex would answer None
    (it matches those names and no other). False means: ask verify_skip_regex."""
    return _candidate_count(regex, unmapped) == len(unmapped) and _candidate_count(regex, mapped) == 0


ENGRAM_TABLE_RE = re.compile(r"^layers\.[0-9]+\.engram\.embed\.(weight|scale)$")


def engram_tables(names: set[str]) -> set[str]:
    """The Engram table tensors among `names`: a skip rule may also cover these (SSD mode)."""
    return {n for n in names if ENGRAM_TABLE_RE.match(n)}


def verify_skip_regex(
    regex: str, all_names: set[str], unmapped: set[str], may_skip: frozenset[str] | set[str] = frozenset()
) -> str | None:
    """None if `regex` matches every unmapped tensor among all names in the linked files and no
    other tensor except those in `may_skip` (the Engram tables, which the sm_80 engine's SSD row
    store reads itself: its launcher skips them at load, consumers.md §3)."""
    try:
        rx = re.compile(regex)
    except re.error as e:
        return f"does not compile: {e}"
    if unmapped <= all_names and _candidate_count(regex, unmapped) == len(unmapped):
        # every unmapped name matches; none other does iff the rule finds as many among all names
        if _candidate_count(regex, all_names) == len(unmapped):
            return None
    matched = {n for n in all_names if rx.search(n)}
    if unmapped <= matched and matched - unmapped <= set(may_skip):
        return None
    parts = []
    if unmapped - matched:
        parts.append(
            f"leaves {len(unmapped - matched)} unmapped tensor(s) to the loader, e.g. {min(unmapped - matched)}"
        )
    extra = matched - unmapped - set(may_skip)
    if extra:
        parts.append(f"also skips {len(extra)} mapped tensor(s), e.g. {min(extra)}")
    return "; ".join(parts)
