"""NVIDIA sm_80 (CMP 170HX) backend: EXL3+FP8 hybrid, Engram on NVMe, TP4/PP4, docker run, P2P policy."""

from recipekit.backend_spec import BackendSpec

BACKEND = BackendSpec(
    entry="render:CudaSm80Backend",
    accelerator="nvidia",
    device_vendor="nvidia",
    summary="NVIDIA sm_80 cards: vLLM in a docker container",
    layouts=("recipekit.hybrid.hybrid_layout",),  # the EXL3+FP8 hybrid its recipes serve
)
