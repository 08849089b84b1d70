"""A pack's patch judged against another release's files (patches/against.py) and consumer-rule
citations re-located (tools/upgrade/citations.py), on planted files: a hunk whose target text
changed upstream is drift, never applies."""

from __future__ import annotations

import hashlib

from recipekit.patches.against import judge_patch
from recipekit.patches.manifest import PatchEntry
from recipekit.tools.upgrade.citations import relocate

OLD = "".join(f"line {i}\n" for i in range(1, 21))
NEW = OLD.replace("line 10\n", "line TEN\n")
BODY = b"""diff --git a/m.py b/m.py
--- a/m.py
+++ b/m.py
@@ -9,3 +9,3 @@
 line 9
-line 10
+line ten
 line 11
"""


def sha(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


def entry() -> PatchEntry:
    post = OLD.replace("line 10\n", "line ten\n")
    return PatchEntry(
        id="p", file="p.patch", reason="r", files=[{"path": "m.py", "pre_sha256": sha(OLD), "post_sha256": sha(post)}]
    )


def test_same_base_applies():
    v = judge_patch(entry(), BODY, {"m.py": OLD.encode()})
    assert v.status == "applies"


def test_target_hunk_changed_upstream_is_drift_never_applies():
    v = judge_patch(entry(), BODY, {"m.py": NEW.encode()})
    assert v.status == "drift"
    assert [(h.path, h.stated_line, h.state) for h in v.hunks] == [("m.py", 9, "changed")]
    assert "m.py@9" in v.detail and v.proposed_files == []


def test_moved_hunk_is_drift_with_new_hashes_from_git_apply():
    moved = "header\nheader\n" + OLD
    v = judge_patch(entry(), BODY, {"m.py": moved.encode()})
    assert v.status == "drift" and v.hunks[0].state == "moved" and v.hunks[0].found_line == 11
    [pf] = v.proposed_files
    assert pf["pre_sha256"] == sha(moved)
    assert pf["post_sha256"] == sha(moved.replace("line 10\n", "line ten\n"))


def test_change_already_upstream_is_no_longer_needed():
    v = judge_patch(entry(), BODY, {"m.py": OLD.replace("line 10\n", "line ten\n").encode()})
    assert v.status == "upstream"
    v = judge_patch(entry(), BODY, {"m.py": ("x\n" + OLD.replace("line 10\n", "line ten\n")).encode()})
    assert v.status == "upstream" and v.hunks[0].state == "upstream"


def test_missing_file_is_broken():
    assert judge_patch(entry(), BODY, {"m.py": None}).status == "broken"


def test_citations_move_change_and_go():
    old = {"vllm/models/x/a.py": "a\nassert head_dim == 512\nb\n", "vllm/models/x/gone.py": "z\n"}
    new = {"vllm/models/x/a.py": "new\nnew\na\nassert head_dim == 512\nb\n"}
    [c] = relocate("r", "x/a.py:2", old, new, list(old), list(new))
    assert (c.state, c.proposed, c.path) == ("moved", "x/a.py:4", "vllm/models/x/a.py")
    [c] = relocate("r", "x/gone.py:1", old, new, list(old), list(new))
    assert c.state == "gone"
    new2 = {"vllm/models/x/a.py": "a\nassert head_dim == 256\nb\n"}
    [c] = relocate("r", "x/a.py:2", old, new2, list(old), list(new2))
    assert c.state == "changed" and c.proposed is None
