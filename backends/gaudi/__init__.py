"""Intel Gaudi 2 backend: vllm-gaudi port, MXFP4 checkpoint layout, launch block, gates."""

from recipekit.backend_spec import BackendSpec, CheckpointTools

BACKEND = BackendSpec(
    entry="render:GaudiBackend",
    accelerator="gaudi",
    device_vendor="habana",
    summary="Intel Gaudi 2: vllm-gaudi port in a Habana container",
    checkpoint=CheckpointTools(
        convert="convert:convert_to_gaudi",
        validate="validate:validate_gaudi",
        bench="convert_bench:run_bench",
        render_bench="convert_bench:render_human",
    ),
    layouts=(".layout",),
)
