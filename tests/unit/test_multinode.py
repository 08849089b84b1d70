"""Multi-node layouts: rules with ids, per-node launches, LWS manifest + validators, balancer config."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from recipekit.catalog import load_path, load_recipe
from recipekit.errors import ErrorList, RecipekitError
from recipekit.lint import lint_paths
from recipekit.multinode.k8s import manifest_objects
from recipekit.multinode.nodes import all_nodes, node_config
from recipekit.multinode.render import render
from recipekit.multinode.validate import validate_objects, validate_text

REPO = Path(__file__).resolve().parents[2]
GAUDI = "deepseek-v4.1-flash-1017-gaudi2-8x"
CMP = "deepseek-v4.1-flash-1017-cmp170hx-4x"
CPU = "tiny-deepseek-cpu"
GAUDI_YAML = REPO / "recipes/deepseek-ai/DeepSeek-V4.1-Flash-1017/gaudi2-8x.yaml"


def planted(tmp_path: Path, change) -> Path:
    """A copy of the Gaudi recipe with `change(doc)` applied."""
    doc = yaml.safe_load(GAUDI_YAML.read_text())
    change(doc)
    p = tmp_path / "gaudi.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def codes(fn) -> set[str]:
    with pytest.raises(RecipekitError) as ei:
        fn()
    e = ei.value
    return {x.code for x in e.errors} if isinstance(e, ErrorList) else {e.code}


# ------------------------------------------------------------------ rules


@pytest.mark.parametrize(
    "change,rule",
    [
        (lambda d: d["multinode"]["pp2-tp8-ray"].update(cards_per_node=4), "constraint-mn-parallel-product"),
        (lambda d: d["multinode"]["pp2-tp8-ray"].update(partition="10,30"), "constraint-mn-pp-cuts"),
        (lambda d: d["multinode"]["pp2-tp8-ray"].update(partition="20,21"), "constraint-mn-pp-sum"),
        (lambda d: d["multinode"]["pp2-tp8-ray"].update(partition="20,10,10"), "constraint-mn-pp-stages"),
        (lambda d: d["placement"].update(stage_engram_budget_gib=150), "constraint-mn-engram-fits"),
        (
            lambda d: (
                d["multinode"]["pp2-tp8-ray"]["per_node"][1]
                .setdefault("settings", {})
                .update(CHECKPOINT_SHA256="0" * 64)
            ),
            "constraint-mn-same-identity",
        ),
        (
            lambda d: (
                d["multinode"]["pp2-tp8-ray"]
                .setdefault("args", [])
                .append({"flag": "--no-async-scheduling", "remove": True})
            ),
            "constraint-mn-async-off",
        ),
        (lambda d: d["multinode"]["2x-tp8-replicas"].update(backend="mp"), "constraint-mn-replicas-form"),
    ],
)
def test_each_rule_refuses_render_and_lint_with_its_id(tmp_path, change, rule):
    path = planted(tmp_path, change)
    loaded = load_path(path)
    hits: set[str] = set()
    for name in loaded.recipe.multinode:
        try:
            render(loaded, name, 0, environ={})
        except RecipekitError as e:
            hits |= {x.code for x in e.errors} if isinstance(e, ErrorList) else {e.code}
    assert rule in hits
    _, errors = lint_paths([path])
    assert rule in {e.code for e in errors}, [e.one_line() for e in errors]


def test_shipped_layouts_lint_clean_and_obey_the_rules():
    _files, errors = lint_paths([])
    assert errors == [], [e.one_line() for e in errors]
    g = load_recipe(GAUDI).recipe
    assert set(g.multinode) == {"2x-tp8-replicas", "pp2-tp8-ray"}
    assert g.multinode["pp2-tp8-ray"].partition == "20,20"
    assert set(load_recipe(CMP).recipe.multinode) == {"2x-tp4-replicas", "pp2-tp4-mp"}
    assert set(load_recipe(CPU).recipe.multinode) == {"pp2-mp", "tp2-mp", "2x-replicas"}


def test_schema_refuses_a_per_node_list_of_the_wrong_length(tmp_path):
    path = planted(tmp_path, lambda d: d["multinode"]["pp2-tp8-ray"]["per_node"].pop())
    with pytest.raises(RecipekitError) as ei:
        load_path(path)
    assert "per_node has 1 entries for 2 nodes" in str(ei.value)


# ------------------------------------------------------------------ per-node launches


def test_native_pp2_head_and_headless_worker_flags_and_env():
    loaded = load_recipe(CPU)
    head, worker = all_nodes(loaded, "pp2-mp", environ={})
    h, w = head.eff, worker.eff
    for eff, rank in ((h, "0"), (w, "1")):
        assert eff.arg("--nnodes").value == "2"
        assert eff.arg("--node-rank").value == rank
        assert eff.arg("--master-addr").value == "127.0.0.1"
        assert eff.arg("--master-port").value == "29500"
        assert eff.arg("--pipeline-parallel-size").value == "2"
        assert eff.arg("--distributed-executor-backend").value == "mp"
        assert eff.env["VLLM_HOST_IP"].value == "127.0.0.1"
        assert eff.env["VLLM_PP_LAYER_PARTITION"].value == "2,2"
        assert eff.env["VLLM_ENABLE_V1_MULTIPROCESSING"].value is None
    assert h.arg("--headless") is None and w.arg("--headless") is not None
    assert h.env["VLLM_CPU_OMP_THREADS_BIND"].value == "0" and w.env["VLLM_CPU_OMP_THREADS_BIND"].value == "1"
    assert w.setting("PORT") == 8001
    text = render(loaded, "pp2-mp", 1, environ={}).text
    assert text.splitlines()[2].startswith("# tiny-deepseek-cpu layout pp2-mp: node 1 of 2 (worker 1)")
    assert text.rstrip().endswith("--headless")


def test_user_set_wins_over_the_node_overlay():
    n = node_config(load_recipe(CPU), "pp2-mp", 0, environ={}, sets=["MASTER_PORT=31000", "HEAD_ADDRESS=::1"])
    assert n.eff.arg("--master-port").value == "31000" and n.eff.arg("--master-addr").value == "::1"


def test_ray_worker_runs_only_ray_start_with_the_node_env():
    text = render(load_recipe(GAUDI), "pp2-tp8-ray", 1, environ={}).text
    assert "vllm serve" not in text
    assert "export HCCL_SOCKET_IFNAME='<cluster-interface>'" in text
    assert text.rstrip().endswith(
        "ray start --address='<head-node-address>:6379' --node-ip-address=\"$VLLM_HOST_IP\" --block"
    )
    head = render(load_recipe(GAUDI), "pp2-tp8-ray", 0, environ={}).text
    lines = head.splitlines()
    ray = lines.index('ray start --head --port=6379 --node-ip-address="$VLLM_HOST_IP"')
    assert lines[ray - 1] == "export VLLM_HOST_IP='<head-node-address>'"
    assert "--distributed-executor-backend ray" in head and "--max-num-seqs 4" in head


def test_single_node_renders_are_unchanged_by_multinode_data():
    from recipekit.backends.registry import render_artifact
    from recipekit.config import effective_config

    r = render_artifact(effective_config(load_recipe(CPU), environ={}), "launch")
    assert r.text == (REPO / "tests/golden/render/tiny-deepseek-cpu-launch.txt").read_text()


def _recipe_cli(*args: str) -> subprocess.CompletedProcess:
    """`python -m recipekit ARGS` in a bare environment, bounded in time."""
    env = {"PATH": "/usr/bin:/bin", "RECIPEKIT_DEBUG": "0"}
    return subprocess.run(
        [sys.executable, "-m", "recipekit", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_cli_render_node_and_errors():
    ok = _recipe_cli("render", CPU, "--layout", "tp2-mp", "--node", "1")
    assert ok.returncode == 0, ok.stderr
    assert "--tensor-parallel-size 2" in ok.stdout and "--headless" in ok.stdout
    bad = _recipe_cli("render", CPU, "--layout", "tp2-mp", "--node", "2")
    assert bad.returncode == 2 and "error[node-out-of-range]" in bad.stderr
    nolayout = _recipe_cli("render", CPU, "--node", "1")
    assert nolayout.returncode == 2 and "error[node-needs-multinode-layout]" in nolayout.stderr


# ------------------------------------------------------------------ k8s manifests


@pytest.mark.parametrize(
    "rid,layout", [(GAUDI, "pp2-tp8-ray"), (GAUDI, "2x-tp8-replicas"), (CMP, "pp2-tp4-mp"), (CMP, "2x-tp4-replicas")]
)
def test_lws_manifest_is_valid_and_maps_the_lws_variables(rid, layout):
    text = render(load_recipe(rid), layout, artifact="k8s", environ={}).text
    validate_text(text)  # raises on any schema problem
    lws, svc = list(yaml.safe_load_all(text))
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1" and lws["kind"] == "LeaderWorkerSet"
    lwt = lws["spec"]["leaderWorkerTemplate"]
    replicas = layout.startswith("2x")
    assert lwt["size"] == (1 if replicas else 2) and lws["spec"]["replicas"] == (2 if replicas else 1)
    worker = lwt["workerTemplate"]["spec"]["containers"][0]
    assert worker["volumeMounts"][0] == {"name": "dshm", "mountPath": "/dev/shm"}
    assert lwt["workerTemplate"]["spec"]["volumes"][0]["emptyDir"]["medium"] == "Memory"
    models = "/models/DeepSeek-V4.1-Flash-1017-hpu" if rid == GAUDI else "/models"
    assert {"name": "mount-0", "mountPath": models, "readOnly": True} in worker["volumeMounts"]
    assert "docker" not in yaml.safe_dump(lws["spec"]["leaderWorkerTemplate"]).replace("docker-", "")
    res = "habana.ai/gaudi" if rid == GAUDI else "nvidia.com/gpu"
    assert worker["resources"]["limits"] == {res: 8 if rid == GAUDI else 4}
    assert (
        svc["kind"] == "Service"
        and svc["spec"]["selector"]["leaderworkerset.sigs.k8s.io/name"] == lws["metadata"]["name"]
    )
    if layout == "pp2-tp4-mp":
        # the engine's own command in exec form, not a script
        assert worker["command"] == ["vllm"] and worker["args"][:2] == [
            "serve",
            "/models/DeepSeek-V4.1-Flash-1017-hybrid",
        ]
        args = worker["args"]
        assert args[args.index("--nnodes") + 1] == "$(LWS_GROUP_SIZE)"
        assert args[args.index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
        assert args[args.index("--master-addr") + 1] == "$(LWS_LEADER_ADDRESS)" and "--headless" in args
        assert lwt["leaderTemplate"]["metadata"]["labels"]["role"] == "leader"
        assert "--headless" not in lwt["leaderTemplate"]["spec"]["containers"][0]["args"]
        env = {e["name"]: e.get("value") for e in worker["env"]}
        assert env["VLLM_HOST_IP"] == "$(POD_IP)" and worker["env"][0]["name"] == "POD_IP"
        assert env["VLLM_PP_LAYER_PARTITION"] == "20,20"
        vols = {v["name"]: v for v in lwt["workerTemplate"]["spec"]["volumes"]}
        assert vols["mount-0"]["hostPath"] == {"path": "<MODELS_DIR>"}
        assert "ports" not in worker  # an mp worker serves no API


def _objs():
    loaded = load_recipe(GAUDI)
    return manifest_objects(all_nodes(loaded, "pp2-tp8-ray", environ={}, lws=True))


@pytest.mark.parametrize(
    "plant,needle",
    [
        (lambda o: o[0]["spec"].update(replicas="two"), "spec.replicas"),
        (lambda o: o[0]["spec"]["leaderWorkerTemplate"].update(size="2"), "leaderWorkerTemplate.size"),
        (
            lambda o: o[0]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0].update(bogus=1),
            "'bogus' was unexpected",
        ),
        (
            lambda o: o[0]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0].pop("name"),
            "'name' is a required property",
        ),
        (lambda o: o[1]["spec"]["ports"][0].update(port="http"), "Service spec.ports.0.port"),
        (lambda o: o[0]["spec"]["leaderWorkerTemplate"].update(restartPolicy="Sometimes"), "restartPolicy"),
    ],
)
def test_planted_invalid_manifest_is_refused(plant, needle):
    objs = _objs()
    assert validate_objects(objs) == []
    bad = copy.deepcopy(objs)
    plant(bad)
    errs = validate_objects(bad)
    assert errs and any(needle in e.message for e in errs), [e.one_line() for e in errs]
    assert all(e.code in ("k8s-invalid", "k8s-invalid-value") for e in errs)


def test_kubernetes_validate_alone_would_pass_an_lws_object():
    # why the pinned CRD schema is shipped: kubernetes-validate passes unknown kinds
    import kubernetes_validate

    bad = copy.deepcopy(_objs()[0])
    bad["spec"]["replicas"] = "two"
    try:
        kubernetes_validate.validate(bad, "1.37.0", strict=True)
        passed = True
    except kubernetes_validate.SchemaNotFoundError:
        passed = True  # not validated either
    except kubernetes_validate.ValidationError:
        passed = False
    assert passed and validate_objects([bad])


def test_crd_schema_is_the_pinned_source():
    from recipekit.multinode.crd import LWS_SOURCE, lws_schema

    s = lws_schema()
    assert set(s["properties"]["spec"]["properties"]) >= {"leaderWorkerTemplate", "replicas", "startupPolicy"}
    assert LWS_SOURCE["tag"] == "v0.10.0" and LWS_SOURCE["license"] == "Apache-2.0" and len(LWS_SOURCE["sha256"]) == 64
    assert "description" not in str(s["properties"]["spec"]["properties"]["replicas"])


def test_k8s_needs_a_container_image():
    assert "k8s-needs-image" in codes(lambda: render(load_recipe(CPU), "pp2-mp", artifact="k8s", environ={}))


# ------------------------------------------------------------------ balancer


def test_haproxy_config_checks_health_and_is_accepted_by_haproxy(tmp_path):
    text = render(
        load_recipe(CPU),
        "2x-replicas",
        artifact="lb",
        environ={},
        sets=["LB_PORT=18100", "PORT=18001", "NODE1_PORT=18002"],
    ).text
    assert "option httpchk GET /health" in text and "bind 127.0.0.1:18100" in text
    assert "server node0 127.0.0.1:18001 check" in text and "server node1 127.0.0.1:18002 check" in text
    exe = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    if exe is None:
        pytest.skip("haproxy is not installed (Debian package haproxy)")
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(text)
    ok = subprocess.run([exe, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    cfg.write_text(text.replace("balance leastconn", "balance mostconn"))
    bad = subprocess.run([exe, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0


def test_lb_artifact_only_for_replicas():
    assert "artifact-not-available" in codes(lambda: render(load_recipe(CPU), "pp2-mp", artifact="lb", environ={}))


# ------------------------------------------------------------------ apply pieces (no server)


def test_node_doctor_fails_an_address_that_is_not_this_hosts():
    from recipekit.multinode.apply import node_checks

    n = node_config(load_recipe(CPU), "pp2-mp", 1, environ={}, sets=["NODE1_ADDRESS=192.0.2.7"])
    checks, elsewhere = node_checks(n)
    assert ("node-interface", "FAIL", "VLLM_HOST_IP=192.0.2.7 is not an address of this host") in checks
    assert elsewhere and "reachable from each" in elsewhere[0]
    head = node_config(load_recipe(CPU), "pp2-mp", 0, environ={})
    hc, _ = node_checks(head)
    assert ("node-interface", "OK", "VLLM_HOST_IP=127.0.0.1 is an address of this host") in hc
    assert any(c[0] == "rendezvous-port" for c in hc)


def test_checkpoint_hash_is_read_from_the_manifest_and_a_mismatch_refused(tmp_path):
    import hashlib

    from recipekit.multinode.apply import verify_identity

    (tmp_path / "recipekit-manifest.json").write_text('{"a": 1}\n')
    good = hashlib.sha256(b'{"a": 1}\n').hexdigest()
    loaded = load_recipe(CPU)
    n = node_config(loaded, "pp2-mp", 1, environ={}, sets=[f"MODEL_DIR={tmp_path}", f"CHECKPOINT_SHA256={good}"])
    assert verify_identity(n) == good
    bad = node_config(loaded, "pp2-mp", 1, environ={}, sets=[f"MODEL_DIR={tmp_path}", "CHECKPOINT_SHA256=" + "1" * 64])
    with pytest.raises(RecipekitError) as ei:
        verify_identity(bad)
    assert ei.value.code == "mn-checkpoint-mismatch" and int(ei.value.exit_code) == 4
    assert "node 1" in ei.value.one_line()
    unset = node_config(loaded, "pp2-mp", 1, environ={}, sets=[f"MODEL_DIR={tmp_path}"])
    assert verify_identity(unset) is None


def test_layout_status_with_nothing_started(tmp_path, monkeypatch):
    from recipekit.multinode.apply import layout_status

    monkeypatch.setenv("RECIPEKIT_HOME", str(tmp_path))
    st = layout_status(CPU, "tp2-mp")
    assert st["exit_code"] == 6 and st["down"] == ["node 0 (head)", "node 1 (worker 1)"]


def test_layout_status_names_a_docker_node_by_its_container(tmp_path, monkeypatch, capsys):
    """A docker node's record has no pid: the status line names its container, never "pid None"."""
    import json

    from recipekit.cli.multinode import print_layout_status
    from recipekit.deployment import resolve
    from recipekit.multinode.apply import node_state
    from recipekit.multinode.nodes import node_config

    monkeypatch.setenv("RECIPEKIT_HOME", str(tmp_path))
    dep = resolve(load_recipe(CPU), "tp2-mp", 0, environ={}, node_config=node_config)
    folder = node_state(load_recipe(CPU).id, "tp2-mp", 0)
    folder.mkdir(parents=True)
    record = {"runner": "docker", "container_id": "c0ffee" * 10, "name": "head", "port": 1}
    (folder / "server.json").write_text(json.dumps(record))
    monkeypatch.setattr("recipekit.apply.launch.alive", lambda rec: False)
    assert print_layout_status(dep, "human") == 6  # none running
    out = capsys.readouterr().out
    assert "node 0 (head): NOT running (container c0ffeec0ffee is gone)" in out, out
    monkeypatch.setattr("recipekit.apply.launch.alive", lambda rec: True)
    assert print_layout_status(dep, "human") == 1  # node 1 not started
    out = capsys.readouterr().out
    assert "node 0 (head): running (container c0ffeec0ffee)" in out, out
    assert "pid None" not in out


def test_cli_doctor_for_a_node_checks_locally_and_names_what_others_must_check(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "RECIPEKIT_DEBUG": "0", "RECIPEKIT_HOME": str(tmp_path)}
    base = [sys.executable, "-m", "recipekit", "doctor", CPU, "--layout", "pp2-mp", "--node", "1"]
    ok = subprocess.run(base, capture_output=True, text=True, env=env, timeout=180, cwd=tmp_path)
    assert "OK   node-interface: VLLM_HOST_IP=127.0.0.1 is an address of this host" in ok.stdout
    assert "check on the other nodes: nodes [0]:" in ok.stdout
    bad = subprocess.run(
        base + ["--set", "NODE1_ADDRESS=192.0.2.9"], capture_output=True, text=True, env=env, timeout=180, cwd=tmp_path
    )
    assert bad.returncode == 3 and "FAIL node-interface: VLLM_HOST_IP=192.0.2.9" in bad.stdout


# ------------------------------------------------------------------ rules key on declared parallelism


def test_pp2_tp4_node_runs_the_pipeline_profile_not_the_tp4_one():
    loaded = load_recipe(CMP)
    for n in all_nodes(loaded, "pp2-tp4-mp", environ={}):
        eff = n.eff
        assert eff.layout == "tp4" and eff.declared_parallel("pipeline") == 2 and eff.declared_parallel("tensor") == 4
        assert eff.setting("CUDAGRAPH_MODE") == "PIECEWISE"
        assert eff.setting("CUDAGRAPH_SIZES") == [1, 2, 3, 4, 5, 6, 8, 12, 18, 24, 30, 36, 42, 48]
        assert eff.env_value("DSV41_DYNK") in (None, "")
        assert eff.env_value("DSV41_VARIANTS") == "dsv41_topk_meta,dsv41_h2d_lean,dsv41_ragged_lean,dsv41_gate"
        assert eff.arg("--tensor-parallel-size").value == "4" and eff.arg("--pipeline-parallel-size").value == "2"
    text = render(loaded, "pp2-tp4-mp", 0, environ={}).text
    assert '"cudagraph_mode": "PIECEWISE"' in text and "DSV41_DYNK" not in text
    # the single-node tp4 profile is unchanged
    tp4 = render(loaded, "2x-tp4-replicas", 0, environ={}).text
    assert '"cudagraph_mode": "FULL_AND_PIECEWISE"' in tp4 and "DSV41_DYNK=accept:3,5" in tp4


@pytest.mark.parametrize(
    "sets,rule",
    [
        (["CUDAGRAPH_MODE=FULL_AND_PIECEWISE"], "constraint-pp4-piecewise-graphs"),
        (["DSV41_DYNK=accept:3,5"], "constraint-dynk-tp4-only"),
        (["DSV41_VARIANTS=dsv41_topk_meta"], "constraint-pp4-keeps-four-variants"),
    ],
)
def test_pipeline_rules_hold_for_a_multinode_pipeline_whatever_its_name(sets, rule):
    assert rule in codes(lambda: render(load_recipe(CMP), "pp2-tp4-mp", 0, environ={}, sets=sets))


def test_constraint_path_parallel_is_checked_by_lint():
    from recipekit.constraints import validate_rule

    assert validate_rule({"parallel.pipeline": {"gt": 1}}, "$") == []
    assert validate_rule({"parallel.pipe": {"gt": 1}}, "$")
