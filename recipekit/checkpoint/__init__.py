"""Checkpoint format I/O every backend shares: safetensors, codecs, manifests, the DSV4.1 contract, layout checks."""
