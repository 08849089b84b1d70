"""Class 7: the docker runner keeps docker's meaning (docker/cli opts/gpus.go for --gpus; `-e NAME`
passes the host's value or nothing; an IPv6 loopback bind gives a bracketed URL)."""

from __future__ import annotations

import pytest

pytest.importorskip("docker")


@pytest.mark.parametrize(
    "value,count,ids,caps",
    [
        ('"device=0,1"', 0, ["0", "1"], [["gpu"]]),
        ("all", -1, [], [["gpu"]]),
        ("2", 2, [], [["gpu"]]),
        ("count=all", -1, [], [["gpu"]]),
        ("device=3", 0, ["3"], [["gpu"]]),
        ("device=0,1", 1, ["0"], [["gpu"]]),  # unquoted, the CSV splits it: device 0 and a count of 1
        ('"capabilities=compute,utility",count=1', 1, [], [["compute", "utility", "gpu"]]),
    ],
)
def test_gpus_is_parsed_as_docker_does(value, count, ids, caps):
    from recipekit.apply.runners.docker import parse_run_argv

    _, kw = parse_run_argv(["docker", "run", "--gpus", value, "img"])
    req = kw["device_requests"][0]
    assert (req["Count"], req["DeviceIDs"], req["Capabilities"]) == (count, ids, caps)


@pytest.mark.parametrize("value", ["count=1,count=2", "bogus=1", "many", "", "device=0,device=1"])
def test_gpus_values_docker_refuses_are_refused(value):
    from recipekit.apply.runners.docker import parse_run_argv
    from recipekit.errors import RecipekitError

    with pytest.raises(RecipekitError) as ei:
        parse_run_argv(["docker", "run", "--gpus", value, "img"])
    assert ei.value.code == "docker-arg-invalid" and "\n" not in ei.value.one_line()


def test_env_without_a_value_passes_the_hosts_value_or_nothing(monkeypatch):
    from recipekit.apply.runners.docker import parse_run_argv

    monkeypatch.setenv("HOSTVAL", "from-host")
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    _, kw = parse_run_argv(["docker", "run", "-e", "HOSTVAL", "-e", "NOT_SET_ANYWHERE", "-e", "EMPTY=", "img"])
    assert kw["environment"] == {"HOSTVAL": "from-host", "EMPTY": ""}


@pytest.mark.parametrize(
    "host,url",
    [
        ("::1", "http://[::1]:8000"),
        ("::", "http://127.0.0.1:8000"),
        ("0.0.0.0", "http://127.0.0.1:8000"),
        ("127.0.0.1", "http://127.0.0.1:8000"),
        ("fe80::1", "http://[fe80::1]:8000"),
    ],
)
def test_ipv6_loopback_gives_a_valid_url(host, url):
    import httpx

    from recipekit.apply.launch import base_url

    assert base_url(host, 8000) == url
    assert httpx.URL(url).port == 8000
