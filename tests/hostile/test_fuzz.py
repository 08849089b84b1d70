"""Property-based fuzzing of the loaders that read outside data: recipe text, .env, agent JSON
documents, safetensors headers, checkpoint indexes and the state files (journal, stamp, server
record). Property: a loader returns or raises RecipekitError; nothing else escapes.

Bounded for CI (2 cores): EXAMPLES per loader, no per-example deadline, derandomized so a run is
reproducible; the whole file takes well under a minute.
"""

from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from recipekit.errors import RecipekitError  # noqa: E402

EXAMPLES = 100
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20))
json_values = st.recursive(
    scalars,
    lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(st.text(max_size=8), c, max_size=4)),
    max_leaves=20,
)
hostile_text = st.one_of(
    st.text(max_size=300),
    st.builds(lambda d: "a: " + "[" * d + "]" * d, st.integers(0, 3000)),
    st.builds(lambda d: "[" * d, st.integers(0, 3000)),
    st.builds(lambda n: "a: " + "9" * n, st.integers(1, 6000)),
    st.sampled_from(["a: !!binary aGk=", "a: &x [*x]", "a: 1\na: 2", "{", "\x00", "---\n...\n---", "? [a]\n: b"]),
    json_values.map(json.dumps),
)


def _ok(fn, *a) -> None:
    try:
        fn(*a)
    except RecipekitError as e:
        assert "\n" not in e.one_line() or hasattr(e, "errors")


@FUZZ
@given(hostile_text)
def test_recipe_text(text):
    from recipekit.catalog import parse_recipe_text

    _ok(parse_recipe_text, text, "fuzz.yaml")
    _ok(parse_recipe_text, text, "fuzz.json")


@FUZZ
@given(
    st.one_of(
        st.text(max_size=300),
        st.lists(st.tuples(st.text(max_size=10), st.text(max_size=20)), max_size=8).map(
            lambda kv: "\n".join(f"{k}={v}" for k, v in kv)
        ),
    )
)
def test_env_text(text):
    from recipekit.envfile import parse_env_text

    _ok(parse_env_text, text, ".env")


_DOC_KEYS = st.sampled_from(["schema_version", "id", "content_hash", "recipe", "default_layout", "layouts", "x"])


@FUZZ
@given(
    st.dictionaries(_DOC_KEYS, json_values, max_size=6),
    st.dictionaries(st.sampled_from(["schema_version", "id", "title", "backend"]), json_values, max_size=4),
)
def test_agent_document(doc, recipe):
    from recipekit.catalog import parse_recipe_text

    doc["recipe"] = {"schema_version": 1, **recipe}
    _ok(parse_recipe_text, json.dumps(doc), "doc.json")


_TENSOR = st.fixed_dictionaries(
    {
        "dtype": st.sampled_from(["F32", "BF16", "F8_E4M3", "I8", "X", 5]),
        "shape": st.lists(st.integers(-2, 10**12), max_size=4),
        "data_offsets": st.lists(st.integers(-2, 10**12), max_size=3),
    }
)
headers = st.one_of(
    st.dictionaries(st.text(max_size=12), st.one_of(_TENSOR, json_values), max_size=4).map(json.dumps),
    st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
    st.builds(lambda d: '{"a": ' + "[" * d + "]" * d + "}", st.integers(0, 5000)),
)


@FUZZ
@given(headers, st.integers(0, 1 << 20))
def test_safetensors_header(text, data_len):
    from recipekit.checkpoint.safetensors_io import parse_header

    _ok(parse_header, text.encode("utf-8", "surrogatepass"), data_len)


@FUZZ
@given(
    st.one_of(
        json_values.map(json.dumps),
        st.dictionaries(st.text(max_size=30), st.text(max_size=30), max_size=5).map(
            lambda wm: json.dumps({"weight_map": wm})
        ),
    )
)
def test_checkpoint_index(text):
    from recipekit.checkpoint.safetensors_io import INDEX_NAME, read_index

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / INDEX_NAME).write_text(text)
        (Path(d) / "model-1.safetensors").write_bytes(struct.pack("<Q", 2) + b"{}")
        _ok(read_index, d)


@FUZZ
@given(
    st.one_of(
        json_values, st.fixed_dictionaries({"files": json_values, "links": json_values, "stamp_before": json_values})
    )
)
def test_patch_journal(doc):
    from recipekit.patches.journal import StateDir

    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "t"
        (root / "pkg").mkdir(parents=True)
        outside = Path(d) / "victim"
        outside.write_text("v")
        sd = StateDir(root / ".state", root)
        sd.path.mkdir()
        sd.journal_path.write_text(json.dumps(doc))
        _ok(sd.recover)
        assert outside.read_text() == "v"


@FUZZ
@given(st.one_of(json_values, st.fixed_dictionaries({"applied": json_values, "files": json_values})))
def test_patch_stamp(doc):
    from recipekit.patches.journal import StateDir

    with tempfile.TemporaryDirectory() as d:
        sd = StateDir(Path(d) / ".state", Path(d))
        sd.path.mkdir()
        sd.stamp_path.write_text(json.dumps(doc))
        _ok(sd.read_stamp)


@FUZZ
@given(
    st.one_of(
        json_values,
        st.dictionaries(
            st.sampled_from(
                ["runner", "pid", "pgid", "start_time", "cmdline", "started_at", "port", "container_id", "log"]
            ),
            json_values,
            max_size=8,
        ),
    )
)
def test_server_record(doc):
    from recipekit.apply.launch import load_server
    from recipekit.apply.runners.native import mismatch

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "server.json").write_text(json.dumps(doc))
        try:
            rec = load_server(Path(d))
        except RecipekitError:
            return
        if rec and rec.get("runner") == "native":
            why = mismatch(rec)
            assert why is not None  # a fuzzed record never matches a live process of ours
