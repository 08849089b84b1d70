"""The replicas layout's rehearsal rows without an engine: which layouts get them, the loopback
addresses, the host folder behind a docker recipe's model path, the balancer and completion
verdicts, and rows left not reached after an earlier failure."""

from __future__ import annotations

from pathlib import Path

from recipekit.catalog import load_recipe
from recipekit.deployment import resolve
from recipekit.multinode.nodes import node_config
from recipekit.multinode.render import checked_nodes
from recipekit.rehearse.replica_rows import (
    ROWS,
    balancer_note,
    completion_note,
    host_model_dir,
    is_replicas,
    loopback_addresses,
    rehearse_replicas,
)
from recipekit.rehearse.report import NOT_REACHED, REAL, STANDIN, Rehearsal

CMP_ID = "deepseek-v4.1-flash-1017-cmp170hx-4x"


def _dep(layout):
    return resolve(load_recipe(CMP_ID), layout, None, sets=("PORT=18000",), node_config=node_config)


def test_only_replicas_layouts_get_the_rows():
    assert is_replicas(_dep("2x-tp4-replicas"))
    assert not is_replicas(_dep("pp2-tp4-mp")) and not is_replicas(_dep("tp4")) and not is_replicas(_dep(None))


def test_each_node_address_setting_becomes_its_loopback_address():
    addrs = loopback_addresses(_dep("2x-tp4-replicas"))
    assert [s for s, _ in addrs] == ["HEAD_ADDRESS=127.0.0.1", "NODE1_ADDRESS=127.0.0.2"]
    assert addrs[1][1] == "node 1's address, on loopback here"


def test_docker_model_path_maps_through_the_longest_mount(tmp_path):
    nodes = checked_nodes(
        load_recipe(CMP_ID),
        "2x-tp4-replicas",
        sets=[
            "PORT=18000",
            "LB_PORT=18001",
            "HEAD_ADDRESS=127.0.0.1",
            "NODE1_ADDRESS=127.0.0.2",
            f"MODELS_DIR={tmp_path}/m",
        ],
        environ={},
        host_paths=True,
    )
    got = host_model_dir(nodes[0], "/models/DeepSeek-V4.1-Flash-1017-hybrid", Path("/elsewhere"))
    assert got == tmp_path / "m" / "DeepSeek-V4.1-Flash-1017-hybrid"
    assert host_model_dir(nodes[0], "/root/.cache/x", tmp_path) == tmp_path / "cache" / "root-cache" / "x"
    assert host_model_dir(nodes[0], "/nowhere/x", tmp_path) == Path("/nowhere/x")


def test_balancer_note_names_what_is_wrong():
    up = {"node0": "UP", "node1": "UP"}
    assert balancer_note(up, ["m"], [["m"], ["m"]], "m") is None
    assert balancer_note({"node0": "UP", "node1": "DOWN 1/2"}, ["m"], [["m"], ["m"]], "m") == (
        "haproxy says {'node0': 'UP', 'node1': 'DOWN 1/2'}"
    )
    assert balancer_note({}, ["m"], [], "m") == "haproxy says {}"
    assert balancer_note(up, ["other"], [["m"], ["m"]], "m") == "/v1/models through haproxy lists ['other'], not ['m']"
    assert balancer_note(up, ["m"], [["m"], []], "m") == "node(s) [1] list [[]]"


def test_completion_note_counts_the_sessions_each_server_took():
    assert completion_note({"node0": 3, "node1": 2}, {"node0": 4, "node1": 3}, 2) == ("node0 +1, node1 +1", True)
    assert completion_note({"node0": 3, "node1": 2}, {"node0": 5, "node1": 2}, 2) == ("node0 +2, node1 +0", False)
    assert completion_note({}, {"node0": 2}, 2) == ("node0 +2", False)


def test_rows_not_reached_after_an_earlier_failure(tmp_path):
    reh = Rehearsal(recipe=CMP_ID, layout="2x-tp4-replicas", node=0, home=str(tmp_path))
    reh.error_code = "server-died"
    rehearse_replicas(_dep("2x-tp4-replicas"), reh, None, tmp_path / "replicas", lambda s: None)
    assert [(r.step, r.kind, r.result) for r in reh.rows] == [
        (ROWS[0], STANDIN, NOT_REACHED),
        (ROWS[1], REAL, NOT_REACHED),
        (ROWS[2], REAL, NOT_REACHED),
        (ROWS[3], REAL, NOT_REACHED),
    ]
    assert reh.error_code == "server-died" and not (tmp_path / "replicas").exists()
