"""A step of the apply plan, and the shared steps a backend receives from the application.

A Step says what it will do (`does`: commands it runs, files it writes, calls it makes, for
`plan` and `--dry-run`), which inputs key its stamp, how to run it (`run(ctx) -> outputs`) and
how to verify what an earlier run produced (`verify(ctx, outputs) -> bool`; None = always run).

The shared steps (doctor, fetch, engine image, patch profile, patch pack, launch, wait-ready, smoke, the
checkpoint commands) run the application's machinery (runners, readiness, smoke), one floor
above the backends. So a backend does not import them: `Backend.steps(deployment, kit)` hands
it a `StepKit` (recipekit/apply/kit.py implements it), and the backend imports only this module.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    from recipekit.config import EffectiveConfig

ORDER = ["doctor", "fetch", "prepare-checkpoint", "install-engine", "patch", "launch", "wait-ready", "smoke"]


@dataclass
class Step:
    id: str
    title: str
    does: list[str] = field(default_factory=list)
    inputs: dict = field(default_factory=dict)
    run: Optional[Callable[[Any], dict]] = None  # (ApplyContext) -> outputs
    verify: Optional[Callable[[Any, dict], bool]] = None  # (ApplyContext, outputs) -> still good
    note: str = ""

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "title": self.title,
            "does": self.does,
            "note": self.note,
            "stamped": self.verify is not None,
        }


def cmd(argv: list[str]) -> str:
    return "run: " + shlex.join([str(a) for a in argv])


class StepKit(Protocol):
    """The shared steps and launch helpers the application lends a backend's `steps()`."""

    def doctor_step(self, eff: EffectiveConfig, with_docker: bool) -> Step: ...
    def fetch_step(self, eff: EffectiveConfig) -> Step: ...
    def wait_ready_step(self, eff: EffectiveConfig, timeout_s: Optional[int] = None) -> Step: ...
    def smoke_step(self, eff: EffectiveConfig) -> Step: ...
    def image_step(self, eff: EffectiveConfig, backend: Any) -> Step: ...
    def patch_profile_step(self, eff: EffectiveConfig) -> Step: ...
    def patch_pack_step(self, eff: EffectiveConfig, target: Path) -> Step: ...
    def launch_docker_step(self, eff: EffectiveConfig, run_argv: list[str], host: str, port: int) -> Step: ...
    def checkpoint_step(
        self,
        eff: EffectiveConfig,
        commands: list[list[str]],
        produces: Optional[str],
        title: str,
        must_print: Optional[dict] = None,
        notes: tuple[str, ...] = (),
    ) -> Step: ...
    def launch_container(self, ctx: Any, run_argv: list[str], host: str, port: int) -> dict: ...
    def launch_native(self, ctx: Any, argv: list[str], env_add: dict[str, str], host: str, port: int) -> dict: ...
    def launch_inputs(self, argv: list[str], env: dict, extra: Optional[dict] = None) -> dict: ...
    def launch_verified(self, ctx: Any, outputs: dict) -> bool: ...
