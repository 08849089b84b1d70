"""The package's import graph has no cycle, and at folder level its imports run down the floors.

The graph is built from the source (recipekit/tools/import_graph.py); the floors and the
folder graph are recipekit/tools/floors.py.
"""

from __future__ import annotations

from pathlib import Path

from recipekit.tools.import_graph import cycles, import_graph, imports_of


def test_the_graph_sees_top_level_and_function_level_imports():
    g = import_graph()
    assert "recipekit.apply.runners.registry" in g["recipekit.apply.launch"]  # top level
    assert "recipekit.apply.pipeline" in g["recipekit.cli.apply"]  # inside a command function
    assert "recipekit.backends.registry" in g["recipekit.apply.pipeline"]  # a mapped folder (backends/)


def test_type_checking_imports_are_not_run_time_edges(tmp_path: Path):
    src = tmp_path / "m.py"
    src.write_text(
        "from typing import TYPE_CHECKING\nimport typing\nif TYPE_CHECKING:\n    from pkg import a\n"
        "if typing.TYPE_CHECKING:\n    import pkg.b\nelse:\n    import pkg.c\nfrom pkg import d\n"
    )
    mods = {n: tmp_path for n in ("pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d", "m")}
    assert imports_of("m", src, mods) == {"pkg.c", "pkg.d"}


def test_cycles_are_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_no_import_cycle():
    found = cycles(import_graph())
    assert found == [], f"{len(found)} import cycle(s):\n" + "\n".join(" <-> ".join(c) for c in found)


# --------------------------------------------------------------------------- floors (folder level)


def test_every_folder_has_a_floor_and_the_folder_graph_runs_down():
    from recipekit.tools import floors

    fg = floors.folder_graph()
    assert set(fg) == set(floors.FOLDERS)  # every module lands in a folder the floors name
    assert floors.folder_cycles(fg) == [], "the folder graph has a cycle"
    bad = floors.upward(fg)
    assert bad == [], "imports that run up the floors (move what is needed down, or hand it in):\n" + "\n".join(bad)
    # every listed sideways edge is still there (a removed one leaves the list)
    have = {(a, b) for a, t in fg.items() for b in t}
    assert set(floors.SIDEWAYS) <= have, f"stale SIDEWAYS entries: {sorted(set(floors.SIDEWAYS) - have)}"


def test_the_floor_check_fails_on_a_planted_upward_edge_and_a_folder_cycle():
    from recipekit.tools import floors
    from recipekit.tools.import_graph import import_graph

    g = import_graph()
    g["recipekit.schema"].add("recipekit.tools.doctor.collect")  # core -> domain
    g["recipekit.hybrid.assemble"].add("recipekit.apply.steps")  # domain -> application
    g["recipekit.patches.applier"].add("recipekit.bench.target")  # an unlisted domain -> domain edge
    bad = floors.upward(floors.folder_graph(g))
    assert any(b.startswith("recipekit (core) -> tools (domain)") for b in bad), bad
    assert any(b.startswith("hybrid (domain) -> recipekit/apply (application)") for b in bad), bad
    assert any(b.startswith("patches -> bench joins two domain folders") for b in bad), bad
    g = import_graph()
    assert floors.folder_cycles(floors.folder_graph(g)) == []
    g["recipekit.checkpoint.layout"].add("recipekit.hybrid.assemble")  # hybrid <-> checkpoint
    assert floors.folder_cycles(floors.folder_graph(g)) == [["hybrid", "recipekit/checkpoint"]]


def test_the_modules_land_in_their_folders():
    from recipekit.tools.floors import folder_of

    assert folder_of("recipekit.schema") == "recipekit"
    assert folder_of("recipekit.backend_discovery") == "recipekit"
    assert folder_of("recipekit.checkpoint.layout") == "recipekit/checkpoint"
    assert folder_of("recipekit.apply") == "recipekit/apply"
    assert folder_of("recipekit.apply.runners.docker") == "recipekit/apply"
    assert folder_of("recipekit.lint") == "recipekit (app)"
    assert folder_of("recipekit.__main__") == "recipekit/cli"
    assert folder_of("recipekit.backends.gaudi.layout") == "backends"
    assert folder_of("recipekit.tools") == "tools"


def test_the_committed_picture_shows_the_current_folder_graph():
    from recipekit import png
    from recipekit.tools import floors

    picture = Path(__file__).resolve().parents[2] / "docs" / "floors.png"
    stored = png.text_chunks(picture.read_bytes()).get(floors.DIGEST_KEY)
    now = floors.edges_digest(floors.folder_graph())
    assert stored == now, "docs/floors.png is stale: run `python -m recipekit.tools.floors --png docs/floors.png`"


def test_a_picture_of_another_graph_is_seen_as_stale():
    from recipekit import png
    from recipekit.tools import floors

    fg = floors.folder_graph()
    other = {k: dict(v) for k, v in fg.items()}
    other["hybrid"]["patches"] = ["recipekit.hybrid.x -> recipekit.patches.y"]
    stored = png.text_chunks(floors.draw(other))[floors.DIGEST_KEY]
    assert stored == floors.edges_digest(other) != floors.edges_digest(fg)
