"""The pipeline's stage names in order, importable without pandas: the CLI's --help lists them, and
``npuprof.pipeline.stages`` registers its stages in exactly this order (checked when it is imported)."""

STAGE_NAMES: tuple[str, ...] = (
    "normalize",
    "segment",
    "classify",
    "summarize",
    "evidence",
    "model",
    "cross_rank",
    "diagnostics",
    "report",
)
