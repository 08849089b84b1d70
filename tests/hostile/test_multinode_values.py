"""Class: injected or out-of-range values in rendered multi-node artifacts (HAProxy config, k8s
manifests, launch flags). Each is refused by the render with its code, exit 2, nothing written;
the HAProxy read-back and the Kubernetes value rules refuse planted configs and objects."""

from __future__ import annotations

import copy
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from recipekit.catalog import load_recipe
from recipekit.errors import ErrorList, RecipekitError
from recipekit.multinode.balancer import expected_structure, haproxy_config
from recipekit.multinode.haproxy_check import check_with_haproxy, compare
from recipekit.multinode.k8s import manifest_objects
from recipekit.multinode.nodes import all_nodes
from recipekit.multinode.validate import validate_objects
from tests.hostile.conftest import REPO, Sandbox, guard, refused

CMP = "deepseek-v4.1-flash-1017-cmp170hx-4x"
CPU = "tiny-deepseek-cpu"
CMP_YAML = REPO / "recipes/deepseek-ai/DeepSeek-V4.1-Flash-1017/cmp170hx-4x.yaml"
EVIL_SERVER = "10.0.0.1:8000 check\n    server evil 1.2.3.4:80"
HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)


def _render(sb: Sandbox, *args: str, code: str) -> None:
    out = sb.work / "out.txt"
    with guard(sb):
        res = sb.cli("render", *args, "--out", str(out))
    refused(res, code, 2)
    assert not out.exists()


# ------------------------------------------------------------------ addresses and ports


@pytest.mark.parametrize(
    "var,value",
    [
        ("HEAD_ADDRESS", EVIL_SERVER),
        ("NODE1_ADDRESS", "10.0.0.2:8000 check\nbackend evil\n    server x 1.2.3.4:80"),
        ("HEAD_ADDRESS", "1.2.3.4:80 check #"),
        ("NODE1_ADDRESS", "10.0.0.2\r"),
        ("HEAD_ADDRESS", "300.1.2.3"),
        ("HEAD_ADDRESS", "-rig.lan"),
    ],
)
def test_lb_refuses_an_address_that_is_not_one(sandbox: Sandbox, monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    _render(sandbox, CMP, "--layout", "2x-tp4-replicas", "--artifact", "lb", code="mn-bad-address")


@pytest.mark.parametrize("artifact", ["launch", "k8s"])
def test_mp_head_address_with_a_newline_is_refused_in_every_artifact(sandbox: Sandbox, monkeypatch, artifact):
    monkeypatch.setenv("HEAD_ADDRESS", "10.0.0.1\n--trust-remote-code")
    _render(sandbox, CMP, "--layout", "pp2-tp4-mp", "--artifact", artifact, code="mn-bad-address")


@pytest.mark.parametrize("port", ["-1", "0", "70000", "65536", "80 check"])
def test_ports_out_of_range_are_refused(sandbox: Sandbox, port):
    # an int setting refuses text itself (invalid-setting); the range is the multi-node check's
    code = "invalid-setting" if " " in port else "mn-bad-port"
    # the server's PORT is checked where the Deployment resolves the address, before any node renders
    _render(
        sandbox, CMP, "--layout", "2x-tp4-replicas", "--artifact", "lb", "--set", f"PORT={port}", code="invalid-setting"
    )
    _render(sandbox, CPU, "--layout", "2x-replicas", "--artifact", "lb", "--set", f"LB_PORT={port}", code=code)
    _render(sandbox, CPU, "--layout", "pp2-mp", "--set", f"MASTER_PORT={port}", code=code)


@pytest.mark.parametrize(
    "field,value,code",
    [
        ("health_path", "/health\n    server evil 1.2.3.4:80", "mn-bad-http-path"),
        ("health_path", "/health#x", "mn-bad-http-path"),
        ("health_path", "health", "mn-bad-http-path"),
        ("bind_host", "0.0.0.0:1\n    use_backend evil", "mn-bad-address"),
        ("bind_host", "127.0.0.1 ", "mn-bad-address"),
    ],
)
def test_balancer_fields_of_the_recipe_are_typed(sandbox: Sandbox, field, value, code):
    line = f"    {field}: {value!r}\n" if field == "health_path" else f"    bind_host: {value!r}\n"
    old = "    balancer:\n      port: ${LB_PORT}\n      health_path: /health\n"
    new = (
        "    balancer:\n      port: ${LB_PORT}\n"
        + line
        + ("" if field == "health_path" else "      health_path: /health\n")
    )
    path = sandbox.tiny({old: new.replace("    " + field, "      " + field)})
    _render(sandbox, str(path), "--layout", "2x-replicas", "--artifact", "lb", code=code)


def test_three_replicas_without_per_node_share_one_address(sandbox: Sandbox):
    old = "    data_parallel: 2\n    backend: replicas\n    per_node:\n      - {}\n      - settings: {PORT: '${NODE1_PORT}'}\n"
    new = "    data_parallel: 3\n    backend: replicas\n"
    path = sandbox.tiny(
        {
            old: new,
            "    identity_settings: [CHECKPOINT_SHA256]\n    nodes: 2\n    cards_per_node: 1\n    data_parallel": "XX",
        }
    )
    text = path.read_text().replace(
        "XX", "    identity_settings: [CHECKPOINT_SHA256]\n    nodes: 3\n    cards_per_node: 1\n    data_parallel", 1
    )
    path.write_text(text)
    _render(sandbox, str(path), "--layout", "2x-replicas", "--artifact", "lb", code="mn-replicas-share-address")


# ------------------------------------------------------------------ partitions and bounds


@pytest.mark.parametrize("partition", ["1,,1", "0,2", " 1 , 1 ", "1,1,", "+1,1", "1.0,1"])
def test_bad_partitions_are_refused(sandbox: Sandbox, partition):
    # in the recipe: the schema pattern; through --set: the node's typed values
    path = sandbox.tiny({"    partition: '2,2'\n": f"    partition: {partition!r}\n"})
    for cmd in ("lint", "render"):
        with guard(sandbox):
            res = sandbox.cli(cmd, path, *(["--layout", "pp2-mp"] if cmd == "render" else []))
        assert res.code == 2 and "partition" in res.err, res.err
    _render(
        sandbox, CPU, "--layout", "pp2-mp", "--set", f"env.VLLM_PP_LAYER_PARTITION={partition}", code="mn-bad-partition"
    )


def test_partition_must_sum_to_the_model_layers(sandbox: Sandbox):
    _render(sandbox, CPU, "--layout", "pp2-mp", "--set", "env.VLLM_PP_LAYER_PARTITION=2,1", code="constraint-mn-pp-sum")
    path = sandbox.tiny({"    partition: '2,2'\n": "    partition: '3,2'\n"})
    _render(sandbox, str(path), "--layout", "pp2-mp", code="constraint-mn-pp-sum")


@pytest.mark.parametrize("field,value", [("nodes", 1_000_000), ("nodes", 65), ("cards_per_node", 10_000)])
def test_node_and_card_counts_have_schema_bounds(sandbox: Sandbox, field, value):
    text = (REPO / "recipes/local/tiny-deepseek-cpu.yaml").read_text()
    i = text.index("  2x-replicas:\n")
    head, seg = text[:i], text[i:]
    seg = seg.replace("    data_parallel: 2\n", f"    data_parallel: {value}\n", 1)
    seg = seg.replace(f"    {field}: ", f"    {field}: {value}\n    old_{field}: ", 1).replace(
        f"    old_{field}: 2\n", "", 1
    )
    seg = seg.replace(f"    old_{field}: 1\n", "", 1)
    seg = seg.replace("    per_node:\n      - {}\n      - settings: {PORT: '${NODE1_PORT}'}\n", "", 1)
    path = sandbox.recipe(head + seg, "tiny.yaml")
    t = time.monotonic()
    with guard(sandbox):
        res = sandbox.cli("render", path, "--layout", "2x-replicas", "--artifact", "lb")
    took = time.monotonic() - t
    assert res.code == 2 and "Traceback" not in res.err, res.err
    assert f"multinode.2x-replicas.{field}" in res.err and "less than or equal to" in res.err, res.err
    assert "(hint:" in res.err and "Upper bound:" in res.err, res.err  # the bound's reason
    assert took < 10, took  # refused by the schema, before any node is built


# ------------------------------------------------------------------ HAProxy read-back


def _cpu_lb_nodes():
    return all_nodes(
        load_recipe(CPU), "2x-replicas", environ={}, sets=["LB_PORT=18100", "PORT=18001", "NODE1_PORT=18002"]
    )


@pytest.mark.parametrize(
    "plant",
    [
        lambda t: t.replace("    server node1", "    server evil 1.2.3.4:80 check\n    server node1"),
        lambda t: t + "\nbackend evil\n    server x 1.2.3.4:80\n",
        lambda t: t.replace(
            "    default_backend replicas", "    default_backend replicas\n    use_backend evil if TRUE"
        ),
        lambda t: t.replace("127.0.0.1:18002", "127.0.0.9:18002"),
        lambda t: t.replace("    bind 127.0.0.1:18100", "    bind 127.0.0.1:18100\n    bind 0.0.0.0:80"),
        lambda t: t + "listen stats\n    bind :9000\n",
        lambda t: t.replace("    server node1 127.0.0.1:18002 check\n", ""),
        lambda t: t.replace(
            "    balance leastconn", "    balance leastconn\n    http-request redirect location http://evil/"
        ),
    ],
)
def test_read_back_refuses_a_planted_config(plant):
    nodes = _cpu_lb_nodes()
    text = haproxy_config(nodes)
    compare(text, expected_structure(nodes))  # the real one holds exactly what the layout implies
    bad = plant(text)
    assert bad != text
    with pytest.raises(RecipekitError) as ei:
        compare(bad, expected_structure(nodes))
    assert ei.value.code == "lb-readback-mismatch"


@pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (Debian package haproxy)")
def test_haproxy_accepts_the_planted_server_so_only_the_read_back_catches_it(tmp_path):
    nodes = _cpu_lb_nodes()
    bad = haproxy_config(nodes).replace("    server node1", "    server evil 1.2.3.4:80 check\n    server node1")
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(bad)
    r = subprocess.run([HAPROXY, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr  # the consumer alone calls it valid
    assert "checked with haproxy -c" in check_with_haproxy(bad)
    with pytest.raises(RecipekitError):
        compare(bad, expected_structure(nodes))
    with pytest.raises(RecipekitError) as ei:
        check_with_haproxy(bad.replace("balance leastconn", "balance mostconn"))
    assert ei.value.code == "lb-haproxy-refused"


@pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (Debian package haproxy)")
def test_render_lb_runs_haproxy_with_names_stood_in(sandbox: Sandbox):
    res = sandbox.cli(
        "render",
        CMP,
        "--layout",
        "2x-tp4-replicas",
        "--artifact",
        "lb",
        "--set",
        "HEAD_ADDRESS=10.0.0.1",
        "--set",
        "NODE1_ADDRESS=rig1.lan",
        "--format",
        "json",
    )
    assert res.code == 0, res.err
    import json

    note = json.loads(res.out)["note"]
    assert "read back" in note and "checked with haproxy -c" in note and "1 server name" in note


# ------------------------------------------------------------------ k8s value rules


def _objs():
    return manifest_objects(all_nodes(load_recipe(CMP), "pp2-tp4-mp", environ={}, lws=True))


def _leader(o):
    return o[0]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]


@pytest.mark.parametrize(
    "plant,needle",
    [
        (lambda o: _leader(o)["ports"][0].update(containerPort=-1), "containerPort"),
        (lambda o: _leader(o)["ports"][0].update(containerPort=0), "containerPort"),
        (lambda o: _leader(o)["ports"][0].update(containerPort=70000), "containerPort"),
        (lambda o: o[1]["spec"]["ports"][0].update(port=0), "spec.ports[0].port"),
        (lambda o: o[1]["spec"]["ports"][0].update(port=-1), "spec.ports[0].port"),
        (lambda o: o[0]["metadata"].update(namespace="Evil NS; x"), "metadata.namespace"),
        (lambda o: o[1]["metadata"].update(name="leader\nx"), "metadata.name"),
        (lambda o: o[0]["metadata"].update(name="Name_With_Caps"), "metadata.name"),
        (lambda o: _leader(o).update(name="vllm leader"), "containers[0].name"),
        (lambda o: _leader(o)["env"].append({"name": "1BAD", "value": "x"}), "env["),
        (lambda o: o[0]["metadata"]["labels"].update(app="a b"), "metadata.labels.app"),
        (
            lambda o: o[0]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["volumes"].append(
                {"name": "up", "hostPath": {"path": "/models/../etc"}}
            ),
            "hostPath.path",
        ),
    ],
)
def test_k8s_value_rules_refuse_planted_objects(plant, needle):
    objs = _objs()
    assert validate_objects(objs) == []
    bad = copy.deepcopy(objs)
    plant(bad)
    errs = validate_objects(bad)
    assert any(e.code == "k8s-invalid-value" and needle in e.message for e in errs), [e.one_line() for e in errs]


def test_docker_in_pod_is_refused():
    objs = _objs()
    bad = copy.deepcopy(objs)
    c = _leader(bad)
    c["command"] = ["/bin/bash", "-c"]
    c["args"] = [
        "#!/usr/bin/env bash\nset -euo pipefail\ndocker run -d --name ds41-flash --gpus all -p 127.0.0.1:8000:8000 img vllm serve /m\n"
    ]
    errs = validate_objects(bad)
    assert [e.code for e in errs] == ["k8s-docker-in-pod"], [e.one_line() for e in errs]
    c["command"], c["args"] = ["docker"], ["run", "img"]
    assert "k8s-docker-in-pod" in {e.code for e in validate_objects(bad)}


def test_rendered_pods_run_the_engine_not_docker():
    for rid, layout in (
        (CMP, "pp2-tp4-mp"),
        (CMP, "2x-tp4-replicas"),
        ("deepseek-v4.1-flash-1017-gaudi2-8x", "pp2-tp8-ray"),
    ):
        objs = manifest_objects(all_nodes(load_recipe(rid), layout, environ={}, lws=True))
        lwt = objs[0]["spec"]["leaderWorkerTemplate"]
        for key in ("leaderTemplate", "workerTemplate"):
            if key in lwt:
                c = lwt[key]["spec"]["containers"][0]
                words = c["command"] + c.get("args", [])
                assert not any(w == "docker" or "docker run" in w for w in words), words


def test_layout_names_that_fold_together_are_refused(sandbox: Sandbox):
    text = CMP_YAML.read_text()
    block = text[text.index("  pp2-tp4-mp:\n") : text.index("placement:\n")]
    path = sandbox.recipe(
        text.replace("placement:\n", block.replace("  pp2-tp4-mp:\n", "  PP2_TP4_MP:\n") + "placement:\n", 1),
        "cmp.yaml",
    )
    _render(sandbox, str(path), "--layout", "pp2-tp4-mp", "--artifact", "k8s", code="k8s-name-collision")
    with guard(sandbox):
        res = sandbox.cli("lint", path)
    refused(res, "k8s-name-collision", 2)


def test_k8s_errors_are_one_line_each():
    bad = copy.deepcopy(_objs())
    bad[0]["metadata"]["namespace"] = "Evil NS; x\nkind: Secret"
    errs = validate_objects(bad)
    assert errs and all("\n" not in e.one_line() for e in errs)
    with pytest.raises(ErrorList):
        raise ErrorList(errs)
    yaml.safe_dump(bad)  # still a plain object
