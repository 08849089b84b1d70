"""The EXL3+FP8 hybrid checkpoint (assembly, EXL3 pack, its layout check) and the Engram-on-NVMe store."""
