"""Checkpoint machinery: safetensors I/O, codecs (FP8, MXFP4), manifests, hybrid assembly, Engram store."""
