"""The question start.sh prints at the end (a curl line) and the README's quick start ask the local
pydoc model the same thing with the same sampling fields, and those are a setting the on-topic
measurement (backends/cpu/tinylm/ontopic.py) measures."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from recipekit.backends.cpu import pydoc_model as pm
from recipekit.backends.cpu.tinylm import ontopic
from recipekit.catalog import LOCAL_DEFAULT_ID
from recipekit.cli.apply import _model_lines

README = Path(__file__).resolve().parents[2] / "README.md"


def _body_of(curl: str) -> dict:
    argv = shlex.split(curl)
    return json.loads(argv[argv.index("-d") + 1])


def test_start_sh_and_the_readme_ask_the_same_question_with_the_same_fields():
    lines = _model_lines(LOCAL_DEFAULT_ID, "http://127.0.0.1:8000", [])
    assert lines[0] == "model: tiny-deepseek"
    printed = _body_of(lines[1].removeprefix("try:   "))
    assert printed == {
        "model": "tiny-deepseek",
        "messages": [{"role": "user", "content": "What does the with statement do?"}],
        "max_tokens": 100,
        **pm.ASK_FIELDS,
    }
    quick = README.read_text(encoding="utf-8").split("\n## ", 2)[1]  # the first section: the quick start
    m = re.search(r"```bash\n(curl -s http://127\.0\.0\.1:8000/v1/chat/completions .*?)\n```", quick, re.S)
    assert m, "the quick start has no curl example"
    assert _body_of(m.group(1).replace("\\\n", " ")) == printed
    assert pm.ASK_FIELDS in list(ontopic.SETTINGS.values())  # a measured setting
    assert lines[2].startswith("about: pydoc model")


def test_random_weights_get_no_pydoc_sampling_fields():
    lines = _model_lines(LOCAL_DEFAULT_ID, "http://127.0.0.1:8000", ["WEIGHTS=random"])
    assert set(_body_of(lines[1].removeprefix("try:   "))) == {"model", "messages", "max_tokens"}
    assert len(lines) == 2


def test_the_on_topic_criterion():
    keys = dict(ontopic.QUESTIONS)["What does the with statement do?"]
    assert ontopic.on_topic("The with statement wraps a block in a Context Manager.", keys)
    assert not ontopic.on_topic("The with statement is used with a with statement.", keys)  # echo only
    for q, ks in ontopic.QUESTIONS:
        assert ks and not any(k.lower() in q.lower() for k in ks), q  # no key word is in its question
    assert len(ontopic.QUESTIONS) == 10
