"""Does the served pydoc model answer on topic? Asks QUESTIONS under each sampling setting of
SETTINGS and prints, per setting, how many answers are on topic.

    python -m recipekit.backends.cpu.tinylm.ontopic --url http://127.0.0.1:8000 [--model tiny-deepseek]

On topic (the stated criterion): the answer holds at least one of the question's key words
(case-insensitive), words taken from that topic's pydoc text and absent from the question, so
an answer that only echoes the question does not count. Asked over the server's own chat
template (/v1/chat/completions), as the `curl` line start.sh prints. A measuring command, not a
test: the figure depends on the served model and the engine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

# (question, key words): the topic's own terms from CPython 3.11's pydoc topics
QUESTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("What does the with statement do?", ("context manager", "__enter__", "__exit__")),
    ("What does the for statement do?", ("iterable", "iterator", "sequence")),
    ("What does the try statement do?", ("exception", "except")),
    ("What does the while statement do?", ("loop", "repeated execution")),
    ("What does the import statement do?", ("module", "package")),
    ("What does the raise statement do?", ("exception", "traceback")),
    ("What does the assert statement do?", ("assertionerror", "debug")),
    ("What does the global statement do?", ("namespace", "identifier", "variable")),
    ("How does the return statement work?", ("function", "expression list")),
    ("Explain the del statement.", ("deletion", "delete", "unbind")),
)

# name -> the request's sampling fields (vLLM's OpenAI server; repetition_penalty is its extra field)
SETTINGS: dict[str, dict[str, Any]] = {
    "server default (no sampling fields)": {},
    "temperature 1.0": {"temperature": 1.0},
    "temperature 0 (greedy)": {"temperature": 0.0},
    "greedy, repetition_penalty 1.2": {"temperature": 0.0, "repetition_penalty": 1.2},
    "temperature 0.3, top_p 0.9, repetition_penalty 1.1": {"temperature": 0.3, "top_p": 0.9, "repetition_penalty": 1.1},
    "temperature 0.7, top_p 0.9": {"temperature": 0.7, "top_p": 0.9},
}
MAX_TOKENS = 100
MAX_BYTES = 1 << 20  # one answer; a larger body is refused


def on_topic(answer: str, keys: tuple[str, ...]) -> bool:
    low = answer.lower()
    return any(k.lower() in low for k in keys)


def ask(url: str, model: str, question: str, fields: dict[str, Any], timeout_s: float = 120.0) -> str:
    import httpx  # lazy: only the measurement talks to a server

    body = {"model": model, "messages": [{"role": "user", "content": question}], "max_tokens": MAX_TOKENS, **fields}
    buf = bytearray()
    with httpx.stream("POST", url.rstrip("/") + "/v1/chat/completions", json=body, timeout=timeout_s) as r:
        for chunk in r.iter_bytes():
            buf += chunk
            if len(buf) > MAX_BYTES:
                raise SystemExit(f"the answer to {question!r} is over {MAX_BYTES} bytes")
        if r.status_code != 200:
            raise SystemExit(f"{url}: HTTP {r.status_code} for {question!r}: {bytes(buf[:300])!r}")
    data = json.loads(bytes(buf))
    got = data.get("model")
    if got != model:  # know which server answers
        raise SystemExit(f"{url} answered as model {got!r}, not {model!r}")
    content = data["choices"][0]["message"].get("content")
    if not isinstance(content, str):
        raise SystemExit(f"no text answer to {question!r}: {data['choices'][0]}")
    return content


def greedy(fields: dict[str, Any]) -> bool:
    return fields.get("temperature") == 0.0


def measure(url: str, model: str, settings: dict[str, dict[str, Any]], rounds: int = 1) -> dict:
    """Each setting over QUESTIONS; a sampled one `rounds` times (a greedy one once: it repeats)."""
    rows = []
    for name, fields in settings.items():
        answers: list[dict[str, Any]] = []
        for _ in range(1 if greedy(fields) else rounds):
            for q, keys in QUESTIONS:
                a = ask(url, model, q, fields)
                answers.append({"question": q, "answer": a, "on_topic": on_topic(a, keys)})
        hits = sum(x["on_topic"] for x in answers)
        rows.append({"setting": name, "fields": fields, "on_topic": hits, "asked": len(answers), "answers": answers})
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "questions": len(QUESTIONS), "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:8000")
    ap.add_argument("--model", default="tiny-deepseek", help="the served model name")
    ap.add_argument("--format", choices=("text", "json"), default="text")
    ap.add_argument("--show", action="store_true", help="print each answer's first 160 characters")
    ap.add_argument("--rounds", type=int, default=3, help="times a sampled setting is asked (default 3)")
    a = ap.parse_args(argv)
    res = measure(a.url, a.model, SETTINGS, max(1, a.rounds))
    if a.format == "json":
        print(json.dumps(res, indent=2))
        return 0
    print(f"{res['date']}: on topic = one of the question's key words in the answer; {res['questions']} questions")
    for row in res["rows"]:
        print(f"{row['on_topic']:2d}/{row['asked']:<2d} {row['setting']}  {json.dumps(row['fields'])}")
        if a.show:
            for x in row["answers"]:
                mark = "+" if x["on_topic"] else "-"
                print(f"     {mark} {x['question']} -> {x['answer'][:160]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
