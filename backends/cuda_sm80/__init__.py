"""NVIDIA sm_80 (CMP 170HX) backend: EXL3+FP8 hybrid, Engram on NVMe, TP4/PP4, docker run, P2P policy."""
