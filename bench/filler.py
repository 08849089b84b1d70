"""Deterministic filler text for cold prefill, needles and isolation prompts.

Sentences vary in words and numbers (seeded), so no two runs share a cached block and a
prefix cache that hashes block content cannot short-circuit a "cold" measurement.
"""

from __future__ import annotations

import random

_SUBJECTS = (
    "the harbour crane",
    "a survey team",
    "the night shift",
    "our weather station",
    "the river ferry",
    "a freight train",
    "the orchard crew",
    "the old mill",
    "a delivery drone",
    "the library clock",
    "the north gate",
    "a field engineer",
)
_VERBS = ("logged", "counted", "measured", "recorded", "reported", "moved", "checked", "sorted")
_OBJECTS = (
    "crates of apples",
    "litres of water",
    "boxes of nails",
    "metres of cable",
    "sacks of grain",
    "bundles of paper",
    "rolls of fabric",
    "barrels of oil",
)
_TAILS = (
    "before noon",
    "after the rain",
    "near the bridge",
    "by the east wall",
    "during the storm",
    "at dawn",
    "late in the evening",
    "on the second floor",
)


def sentence(rng: random.Random) -> str:
    return (
        f"{rng.choice(_SUBJECTS).capitalize()} {rng.choice(_VERBS)} {rng.randint(2, 9999)} "
        f"{rng.choice(_OBJECTS)} {rng.choice(_TAILS)}."
    )


def filler(n_words: int, seed: int | str = 0) -> str:
    """About `n_words` words of varied sentences, the same for the same seed."""
    rng = random.Random(str(seed))
    out: list[str] = []
    count = 0
    while count < n_words:
        s = sentence(rng)
        out.append(s)
        count += s.count(" ") + 1
    return " ".join(out)


def insert_at_depth(text: str, needle: str, depth: float) -> str:
    """Put `needle` (a sentence) between sentences at fraction `depth` (0..1) of the text."""
    parts = text.split(". ")
    i = max(0, min(len(parts), round(len(parts) * depth)))
    head, tail = ". ".join(parts[:i]), ". ".join(parts[i:])
    if head and not head.endswith("."):
        head += "."
    return " ".join(p for p in (head, needle, tail) if p)
