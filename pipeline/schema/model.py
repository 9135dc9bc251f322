"""Model fingerprint, hardware peaks, roofline and MFU tables (summarize, issue: model and hardware)."""

from __future__ import annotations

import pyarrow as pa

from npuprof.pipeline.schema.table import CsvView, Table

_S, _F, _I, _B = pa.string(), pa.float64(), pa.int64(), pa.bool_()

FLOPS_FIELDS = [
    ("flops_per_call", _F),  # shape-derived; null where the shapes cannot say
    ("bytes_per_call", _F),  # inputs + outputs
    ("flops_kind", _S),  # cube | vector | null
    ("compute_dtype", _S),  # bf16 | fp16 | fp32 | int8 | ... (cube kernels)
    ("flops_formula", _S),  # the formula and the dims it used
    ("flops_confidence", _S),  # high | medium | low | none
]

SHAPE_KEY_FIELDS = [
    ("name", _S),
    ("type", _S),
    ("op_type", _S),
    ("input_shapes", _S),
    ("input_dtypes", _S),
    ("input_formats", _S),
    ("output_shapes", _S),
    ("output_dtypes", _S),
]

# per rank: one row per distinct kernel + shapes + dtypes
OPERATOR_SHAPES = Table(
    "operator_shapes",
    pa.schema(
        [
            ("evidence_id", _S),  # the operator (r<rank>.op<k>) these calls belong to
            *SHAPE_KEY_FIELDS,
            ("primary_category", _S),
            ("call_count", _I),
            ("duration_sum_us", _F),
            ("layer_call_count", _I),  # calls inside decoder layers
            ("block_kind", _S),  # the block kind most calls sit in
            ("row_start", _I),
            ("row_end", _I),
            *FLOPS_FIELDS,
        ]
    ),
)

# per rank: FLOPs of each step, counted from shapes
STEP_FLOPS = Table(
    "step_flops",
    pa.schema(
        [
            ("step_ordinal", _I),
            ("step_id", _I),
            ("cube_flops", _F),
            ("vector_flops", _F),
            ("bytes_moved", _F),
            ("cube_kernel_us", _F),  # time of cube / mixed kernels in the step
            ("cube_kernel_us_with_flops", _F),  # of which the FLOPs are known
        ]
    ),
)


def _root(name: str, fields: list) -> Table:
    return Table(name, pa.schema(fields), per_rank=False)


MODEL_INFERRED_CONFIG = _root(
    "model_inferred_config",
    [
        ("field", _S),
        ("value", _S),
        ("confidence", _S),
        ("method", _S),
        ("evidence_kernel", _S),
        ("evidence_shapes", _S),
        ("evidence_rank_row", _S),  # r<rank>:row<n>
        ("evidence_id", _S),
        ("note", _S),
    ],
)
MODEL_FEATURE_SUMMARY = _root(
    "model_feature_summary",
    [
        ("feature", _S),
        ("present", _S),  # yes | no | unknown
        ("confidence", _S),
        ("method", _S),
        ("call_count", _I),
        ("evidence_kernel", _S),
        ("evidence_rank_row", _S),
        ("evidence_id", _S),
    ],
)
MODEL_LAYER_TYPE_SUMMARY = _root(
    "model_layer_type_summary",
    [
        ("layer_class_id", _S),
        ("layer_type", _S),  # dense | moe | other
        ("attention_kind", _S),  # from the capture's features: gqa | mha | mqa | mla | linear | none
        ("block_kinds", _S),
        ("member_count", _I),
        ("rank_count", _I),
        ("wall_ms_mean", _F),
    ],
)
MODEL_CANDIDATE_SUMMARY = _root(
    "model_candidate_summary",
    [
        ("rank", _I),
        ("model", _S),
        ("family", _S),
        ("status", _S),  # best | candidate | ruled_out
        ("matched_count", _I),
        ("mismatched_count", _I),
        ("compared_count", _I),
        ("matched_fields", _S),
        ("mismatched_fields", _S),  # field=profile/catalog
        ("source", _S),
    ],
)
MODEL_CONFIG_OVERVIEW = _root(
    "model_config_overview",
    [("field", _S), ("config_value", _S), ("profile_value", _S), ("agreement", _S), ("note", _S)],
)
MODEL_PARAMETER_ESTIMATE = _root(
    "model_parameter_estimate",
    [("component", _S), ("parameters", _F), ("per_layer", _F), ("layers", _I), ("formula", _S)],
)
MODEL_KV_CACHE_ESTIMATE = _root(
    "model_kv_cache_estimate",
    [
        ("attention_kind", _S),
        ("dtype_bytes", _F),
        ("bytes_per_token_per_layer", _F),
        ("bytes_per_token", _F),
        ("gib_per_1k_tokens", _F),
        ("tp", _I),
        ("gib_per_1k_tokens_per_rank", _F),
        ("formula", _S),
    ],
)
HARDWARE_SUMMARY = _root("hardware_summary", [("field", _S), ("value", _S), ("source", _S)])
HARDWARE_THEORETICAL_PEAKS = _root(
    "hardware_theoretical_peaks",
    [
        ("unit", _S),  # cube | vector | hbm
        ("dtype", _S),
        ("theoretical", _F),  # TFLOPS (cube / vector) or GB/s (hbm)
        ("measure", _S),
        ("sustained_factor", _F),
        ("sustained", _F),
        ("source", _S),
    ],
)
OPERATOR_EFFICIENCY_SUMMARY = _root(
    "operator_efficiency_summary",
    [
        *SHAPE_KEY_FIELDS,
        ("rank_count", _I),
        ("call_count", _I),
        ("duration_sum_us", _F),
        ("duration_avg_us", _F),
        *FLOPS_FIELDS,
        ("arithmetic_intensity", _F),  # FLOPs per byte
        ("achieved_tflops", _F),
        ("achieved_gbps", _F),
        ("peak_tflops", _F),  # theoretical, for the compute dtype
        ("sustained_tflops", _F),
        ("sustained_gbps", _F),
        ("roofline_bound", _S),  # compute | memory | unknown
        ("roofline_time_us", _F),  # per call, against the sustained roof
        ("roofline_efficiency", _F),  # roofline time / measured time
        ("reclaimable_us", _F),  # over all calls: measured − roofline time
        ("mfu", _F),  # achieved / theoretical peak (cube kernels)
        ("evidence_rank_row", _S),
        ("evidence_id", _S),
    ],
)
STEP_EFFICIENCY = _root(
    "step_efficiency",
    [
        ("rank_id", _I),
        ("step_ordinal", _I),
        ("step_id", _I),
        ("wall_ms", _F),
        ("cube_flops", _F),
        ("achieved_tflops", _F),  # cube FLOPs / step wall
        ("mfu", _F),  # against the theoretical peak of the step's main compute dtype
        ("flops_coverage", _F),  # share of cube-kernel time whose FLOPs are known
    ],
)

OPERATOR_SHAPES_CSV = CsvView("operator_shape_summary.csv", (OPERATOR_SHAPES,), ("rank_id",))
MODEL_INFERRED_CONFIG_CSV = CsvView("model_inferred_config.csv", (MODEL_INFERRED_CONFIG,), ())
MODEL_FEATURE_SUMMARY_CSV = CsvView("model_feature_summary.csv", (MODEL_FEATURE_SUMMARY,), ())
MODEL_LAYER_TYPE_SUMMARY_CSV = CsvView("model_layer_type_summary.csv", (MODEL_LAYER_TYPE_SUMMARY,), ())
MODEL_CANDIDATE_SUMMARY_CSV = CsvView("model_candidate_summary.csv", (MODEL_CANDIDATE_SUMMARY,), ())
MODEL_CONFIG_OVERVIEW_CSV = CsvView("model_config_overview.csv", (MODEL_CONFIG_OVERVIEW,), ())
MODEL_PARAMETER_ESTIMATE_CSV = CsvView("model_parameter_estimate.csv", (MODEL_PARAMETER_ESTIMATE,), ())
MODEL_KV_CACHE_ESTIMATE_CSV = CsvView("model_kv_cache_estimate.csv", (MODEL_KV_CACHE_ESTIMATE,), ())
HARDWARE_SUMMARY_CSV = CsvView("hardware_summary.csv", (HARDWARE_SUMMARY,), ())
HARDWARE_THEORETICAL_PEAKS_CSV = CsvView("hardware_theoretical_peaks.csv", (HARDWARE_THEORETICAL_PEAKS,), ())
OPERATOR_EFFICIENCY_SUMMARY_CSV = CsvView("operator_efficiency_summary.csv", (OPERATOR_EFFICIENCY_SUMMARY,), ())
STEP_EFFICIENCY_CSV = CsvView("step_efficiency_summary.csv", (STEP_EFFICIENCY,), ())
MODEL_INSIGHTS = "model_insights.json"
HARDWARE_INSIGHTS = "hardware_insights.json"
