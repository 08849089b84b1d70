"""A patch pack's pins against what the stand-in image records it stands for (its labels,
`org.recipekit.standin.pin.<name>`, written from the recipe's engine pins): a pack pin the
image's record contradicts fails with the pin check's own error (pin-mismatch); the pack's
patch bodies that are not public keep the step "not rehearsable", with that reason."""

from __future__ import annotations

from typing import Mapping

from recipekit.patches.manifest import load_pack
from recipekit.patches.pins import Where, raise_for_mismatch, verify_pins


def pack_pins_note(pack_ref: str, recorded: Mapping[str, str], source: str) -> str:
    """Verify the pack's pins against `recorded` (pin name -> commit/prefix/version); raise
    pin-mismatch on a contradiction; else say what was verified and what cannot be rehearsed."""
    short = pack_ref[len("patches/packs/") :] if pack_ref.startswith("patches/packs/") else pack_ref
    loaded = load_pack(short)
    pack = loaded.pack
    checks = verify_pins(pack.pins, Where(recorded=dict(recorded), recorded_source=source))
    raise_for_mismatch(checks, allow_missing=True)
    ok = [c.pin for c in checks if c.status == "ok"]
    unrecorded = [c.pin for c in checks if c.status == "missing"]
    hidden = [p.id for p in pack.patches if not _public_body(p)]
    parts = [f"pack pins verified against {source}: {', '.join(ok) or 'none'}"]
    if unrecorded:
        parts.append(f"not recorded there: {', '.join(unrecorded)}")
    if hidden:
        parts.append(
            f"{len(hidden)} of {len(pack.patches)} patch bodies are not public (the pack records no file, "
            "commit or path for them), so the patches themselves are not rehearsable"
        )
    return "; ".join(parts)


def _public_body(p) -> bool:
    if p.file:
        return True
    s = p.source
    return bool(s is not None and getattr(s, "commit", None) and getattr(s, "path", None))
