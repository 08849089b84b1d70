"""Intel Gaudi 2 backend: vllm-gaudi port, MXFP4 checkpoint layout, launch block, gates."""
from recipekit.backends.spec import BackendSpec

BACKEND = BackendSpec(entry="render:GaudiBackend", accelerator="gaudi", device_vendor="habana",
                      summary="Intel Gaudi 2: vllm-gaudi port in a Habana container")
