"""Which server answers on a port, and whether it is this deployment's.

Before launch: `check_port_free(host, port)` refuses a port another program listens on, naming
it (pid, command line, from the kernel's socket table through psutil), without sending it a
single byte. Once up: `verify_server(record, base_url, served_name)` says whether the socket
listening on the port belongs to the recorded server (native: the recorded pid or one of its
descendants; docker: a port binding of the recorded container, or, with host networking, a
process of the container) and whether `/v1/models` lists the recipe's served model name. No
HTTP request goes to a listener that is not ours.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
from dataclasses import dataclass, field
from typing import Any, Literal, Optional
from urllib.parse import urlsplit

from recipekit.apply import http_probe
from recipekit.errors import ExitCode, RecipekitError

MODELS_MAX_BYTES = 1024 * 1024  # vLLM lists each served name in ~300 bytes
PROBE_TIMEOUT_S = 5.0
PORT_HINT = "stop that program, or pick another port: PORT=NNNN ./start.sh (or --set PORT=NNNN)"


@dataclass(frozen=True)
class Listener:
    """A listening TCP socket on the port: its address and, where the kernel shows it, its process."""

    addr: str
    pid: Optional[int]
    cmdline: Optional[tuple[str, ...]] = None

    def describe(self) -> str:
        if self.pid is None:
            return f"a process this user cannot see (socket {self.addr})"
        cmd = " ".join(self.cmdline) if self.cmdline else "command line not readable"
        return f"pid {self.pid} ({cmd[:200]})"


def _wildcard(ip: str) -> bool:
    return ip in ("", "0.0.0.0", "::")


def _norm(ip: str) -> str:
    try:
        a = ipaddress.ip_address(ip.split("%")[0])
    except ValueError:
        return ip
    if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None:
        return str(a.ipv4_mapped)
    return str(a)


def _conflicts(bind_host: str, listen_ip: str) -> bool:
    """A listener on `listen_ip` takes connections meant for `bind_host` (or blocks its bind)."""
    if _wildcard(bind_host) or _wildcard(listen_ip):
        return True
    return _norm(bind_host) == _norm(listen_ip)


def _resolve(host: str) -> str:
    if _wildcard(host):
        return host
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        try:
            return str(socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0])
        except OSError:
            return host


def listeners(host: str, port: int) -> list[Listener]:
    """The listening TCP sockets (IPv4 and IPv6) on `port` that take `host`'s connections."""
    import psutil  # lazy: pulls psutil

    ip = _resolve(host)
    out = []
    for c in psutil.net_connections(kind="tcp"):
        if c.status != psutil.CONN_LISTEN or not c.laddr or c.laddr.port != int(port):
            continue
        if not _conflicts(ip, c.laddr.ip):
            continue
        cmd = None
        if c.pid is not None:
            try:
                cmd = tuple(psutil.Process(c.pid).cmdline())
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                cmd = None
        out.append(Listener(addr=f"{c.laddr.ip}:{c.laddr.port}", pid=c.pid, cmdline=cmd))
    return sorted(set(out), key=lambda x: (x.pid is None, x.pid or 0, x.addr))


def bind_refused(host: str, port: int) -> bool:
    """True when a bind of host:port fails with EADDRINUSE (SO_REUSEADDR set, as servers do)."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, int(port)))
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False


def port_taken(host: str, port: int, owners: list[Listener], why: str = "") -> RecipekitError:
    who = "; ".join(o.describe() for o in owners) if owners else "a process this user cannot see"
    return RecipekitError(
        code="port-taken",
        exit_code=ExitCode.HOST_CHECK_FAILED,
        message=f"{host}:{port} is taken by another program: {who}{why}",
        hint=PORT_HINT,
    )


def check_port_free(host: str, port: int) -> None:
    """Refuse a port something already listens on: a bind would fail, or a listener that set
    SO_REUSEPORT (as vLLM does) would share it and answer half our clients. Nothing is sent."""
    owners = listeners(host, port)
    if owners or bind_refused(host, port):
        raise port_taken(host, port, owners)


# --------------------------------------------------------------------------- once up


def served_name_of(eff: Any) -> str:
    """The model name clients use, as the launch sets it (--served-model-name ${SERVED_MODEL_NAME})."""
    return str(eff.setting("SERVED_MODEL_NAME", None) or eff.recipe.model.served_name or eff.recipe.model.hf_id)


Status = Literal["ours", "not-listening", "starting", "foreign", "wrong-model", "unreadable"]
_CODES = {
    "not-listening": "server-not-listening",
    "starting": "server-not-ready",
    "unreadable": "server-models-invalid",
}


@dataclass
class Verdict:
    """What the identity check observed and concluded.

    `status`: "ours" (our listener, the served name listed), "not-listening" (nothing listens
    yet), "starting" (our listener, /v1/models not answered yet), "foreign" (another program's
    listener), "wrong-model" (ours, but the served name is not listed), "unreadable" (ours,
    /v1/models answered something that is not a model list)."""

    status: Status
    owner: Optional[str] = None  # "pid 123", "container abc123def456"
    listeners: list[Listener] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ours"

    def to_dict(self) -> dict:
        return {
            "status": self.status,
            "owner": self.owner,
            "listeners": [{"addr": x.addr, "pid": x.pid} for x in self.listeners],
            "models": self.models,
            "note": self.detail or None,
        }

    def error(self, base_url: str, served_name: str) -> RecipekitError:
        host, port = address_of(base_url)
        if self.status == "foreign":
            return port_taken(host, port, self.listeners, f"; our server ({self.owner}) does not hold it")
        if self.status == "wrong-model":
            return RecipekitError(
                code="server-wrong-model",
                exit_code=ExitCode.FAILURE,
                message=f"{base_url}/v1/models lists {self.models[:5]}, not the recipe's {served_name!r}",
                hint="the server runs another model name: check SERVED_MODEL_NAME (or --served-model-name)",
            )
        return RecipekitError(
            code=_CODES.get(self.status, "server-not-ready"),
            exit_code=ExitCode.FAILURE,
            message=f"{base_url}: {self.detail or self.status}",
            hint="see `recipe logs`; `recipe status` says what is running",
        )


def address_of(base_url: str) -> tuple[str, int]:
    u = urlsplit(base_url)
    return u.hostname or "127.0.0.1", u.port or 80


def _ours_native(rec: Any) -> set[int]:
    """The recorded pid and its descendants, while the record is the live process we started."""
    import psutil  # lazy: pulls psutil

    from recipekit.apply.runners import native  # lazy: pulls pydantic

    if not native.is_ours(rec):
        return set()
    try:
        p = psutil.Process(rec.pid)
        return {rec.pid} | {c.pid for c in p.children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def _container(rec: Any) -> Any:
    from recipekit.apply.runners import docker as dk  # lazy: pulls pydantic

    return dk.running_container(dk.client(rec.docker_host), rec)


def published(attrs: dict, host: str, port: int) -> bool:
    """The container's inspect answer (NetworkSettings.Ports) binds host:port on the host."""
    ports = ((attrs.get("NetworkSettings") or {}).get("Ports")) or {}
    for key, binds in ports.items():
        if not str(key).endswith("/tcp"):
            continue
        for b in binds or []:
            hp, hip = str(b.get("HostPort", "")), str(b.get("HostIp", ""))
            if hp == str(port) and _conflicts(_resolve(host), hip):
                return True
    return False


def _container_pids(c: Any) -> set[int]:
    import psutil  # lazy: pulls psutil

    pid = int(((c.attrs.get("State") or {}).get("Pid")) or 0)
    if pid <= 0:
        return set()
    try:
        return {pid} | {x.pid for x in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def owner_verdict(rec: Any, base_url: str) -> Verdict:
    """Who listens on the URL's port, compared with the record; sends nothing to the port."""
    host, port = address_of(base_url)
    found = listeners(host, port)
    if rec.runner == "docker":
        c = _container(rec)
        owner = f"container {rec.container_id[:12]}"
        if c is None:
            return Verdict("foreign" if found else "not-listening", owner, found, detail="our container is gone")
        if (c.attrs.get("HostConfig") or {}).get("NetworkMode") != "host":
            if published(c.attrs, host, port):
                # docker-proxy (or no process at all, with iptables only) holds the host side
                foreign = [x for x in found if x.pid is not None and "docker-proxy" not in " ".join(x.cmdline or [])]
                return Verdict("foreign" if foreign else "ours", owner, found)
            return Verdict(
                "foreign" if found else "not-listening", owner, found, detail="our container publishes no such port"
            )
        ours = _container_pids(c)
    else:
        ours = _ours_native(rec)
        owner = f"pid {rec.pid}"
    if not found:
        return Verdict("not-listening", owner, found, detail=f"nothing listens on {host}:{port}")
    foreign = [x for x in found if x.pid is None or x.pid not in ours]
    if rec.runner == "docker" and foreign and all(x.pid is None for x in foreign) and os.geteuid() != 0:
        # host networking, run by a non-root member of the docker group: the kernel does not
        # show which root process owns the socket. The launch found the port free just before
        # starting the container; the verdict says what it could not see.
        return Verdict("ours", owner, found, detail="listener's process not visible to this user (host network)")
    if foreign:
        return Verdict("foreign", owner, foreign)
    return Verdict("ours", owner, found)


def models_listed(base_url: str, timeout_s: float = PROBE_TIMEOUT_S) -> tuple[Optional[list[str]], str, bool]:
    """(the ids /v1/models lists, why not, whether the answer was a lie rather than not yet one).

    No answer, a timeout or a non-200 status is "not yet"; a 200 whose body is over the cap or is
    not an OpenAI model list is a wrong answer."""
    r = http_probe.get(base_url + "/v1/models", timeout_s=timeout_s, max_bytes=MODELS_MAX_BYTES)
    if r.status != 200 or (r.error and not r.overflow):
        return None, f"/v1/models: {r.why()}", False
    if r.error:
        return None, f"/v1/models: {r.error}", True
    try:
        ids = [m["id"] for m in r.json()["data"]]
    except (ValueError, KeyError, TypeError):
        return None, f"/v1/models is not an OpenAI model list: {r.body[:120]!r}", True
    if not all(isinstance(i, str) for i in ids):
        return None, "/v1/models lists ids that are not strings", True
    return ids, "", False


def verify_server(rec: Any, base_url: str, served_name: str, also: tuple[str, ...] = ()) -> Verdict:
    """Is the server answering at `base_url` the one `rec` records, serving `served_name`?

    The listener's owner is checked first; only our own listener is asked anything: each path of
    `also` (e.g. /health) must answer 200, then /v1/models must list `served_name`."""
    v = owner_verdict(rec, base_url)
    if not v.ok:
        return v
    for path in also:
        if path == "/v1/models":
            continue
        r = http_probe.get(base_url + path, timeout_s=PROBE_TIMEOUT_S, max_bytes=MODELS_MAX_BYTES)
        if not r.ok:
            v.status, v.detail = "starting", f"{path}: {r.why()}"
            return v
    ids, why, lie = models_listed(base_url)
    if ids is None:
        v.status, v.detail = ("unreadable" if lie else "starting"), why
        return v
    v.models = ids
    if served_name not in ids:
        v.status = "wrong-model"
    return v
