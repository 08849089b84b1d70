"""The training text of the pydoc model: CPython's pydoc topics and the standard library's docstrings.

Both ship with every CPython (PSF License). The docstrings are read with `ast` from the standard
library's source files (no module is imported, so nothing runs), in sorted path order; a document
is held out for the perplexity check when the sha256 of its name falls in 1/20 of the hash space.
`python -m recipekit.backends.cpu.tinylm.corpus OUT.jsonl.gz` writes the corpus (gzip mtime 0: the same
Python gives the same bytes).
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import inspect
import json
import sys
import sysconfig
from pathlib import Path
from pydoc_data.topics import topics

SKIP_DIRS = {"test", "tests", "idlelib", "turtledemo", "site-packages", "__pycache__", "lib2to3", "ensurepip"}
MIN_CHARS = 40
HELD_OUT_MOD = 20


def held_out(name: str) -> bool:
    return int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) % HELD_OUT_MOD == 0


def pydoc_topics() -> list[dict]:
    return [{"kind": "topic", "name": k, "text": topics[k].strip()} for k in sorted(topics)]


def _docstrings(path: Path, module: str) -> list[dict]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    out = []

    def add(name: str, node) -> None:
        doc = ast.get_docstring(node, clean=True)
        if doc and len(doc) >= MIN_CHARS:
            out.append({"kind": "doc", "name": name, "text": inspect.cleandoc(doc)})

    add(module, tree)

    def walk(body, prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if node.name.startswith("_") and not (node.name.startswith("__") and node.name.endswith("__")):
                    continue
                add(f"{prefix}.{node.name}", node)
                if isinstance(node, ast.ClassDef):
                    walk(node.body, f"{prefix}.{node.name}")

    walk(tree.body, module)
    return out


def stdlib_docstrings() -> list[dict]:
    root = Path(sysconfig.get_paths()["stdlib"])
    docs = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if any(part in SKIP_DIRS for part in rel.parts[:-1]) or rel.name.startswith("test_"):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if not parts or any(p.startswith("_") and p != "__main__" for p in parts[:1]):
            continue
        docs.extend(_docstrings(path, ".".join(parts)))
    return docs


def build() -> list[dict]:
    docs = pydoc_topics() + stdlib_docstrings()
    for d in docs:
        d["split"] = "held_out" if d["kind"] == "doc" and held_out(d["name"]) else "train"
    return docs


def write(path: Path, docs: list[dict]) -> str:
    data = "".join(json.dumps(d, ensure_ascii=False, sort_keys=True) + "\n" for d in docs).encode()
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
        gz.write(data)
    return hashlib.sha256(data).hexdigest()


def read(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


if __name__ == "__main__":
    docs = build()
    digest = write(Path(sys.argv[1]), docs)
    n = {k: sum(len(d["text"]) for d in docs if d["kind"] == k) for k in ("topic", "doc")}
    print(
        f"{len(docs)} documents, topics {n['topic']:,} chars, docstrings {n['doc']:,} chars, "
        f"python {sys.version.split()[0]}, sha256 of the jsonl {digest}"
    )
