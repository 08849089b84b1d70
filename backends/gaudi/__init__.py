"""Intel Gaudi 2 backend: vllm-gaudi port, MXFP4 checkpoint layout, launch block, gates."""
