"""The apply steps a single-node rehearsal reports, in order (what the rehearsal tests expect)."""

APPLY_STEPS = [
    "preflight",
    "doctor",
    "fetch",
    "prepare-checkpoint",
    "install-engine",
    "patch",
    "launch",
    "wait-ready",
    "smoke",
]
