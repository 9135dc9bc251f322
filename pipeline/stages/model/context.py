"""summarize's model and hardware context: fingerprint, candidates, config comparison, peaks, roofline, MFU.

Plain function over tables: the summarize reduce hands in every rank's shape ops and step FLOPs,
the step accounting, layer classes and the segment / capture facts; this returns the views and JSON
documents it writes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from npuprof.pipeline import schema
from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.input_files import read_input_json
from npuprof.pipeline.modelinfo import catalog as catalog_module
from npuprof.pipeline.modelinfo.catalog import COMPARED_FIELDS
from npuprof.pipeline.modelinfo.configs import (
    COUNT_FIELDS,
    config_overview,
    count_problem,
    kv_cache_estimate,
    normalized_config,
    parameter_estimate,
)
from npuprof.pipeline.modelinfo.hardware import Hardware, choose
from npuprof.pipeline.stages.model.efficiency import main_dtype, operator_efficiency, step_efficiency
from npuprof.pipeline.stages.model.fingerprint import Fingerprint, infer
from npuprof.pipeline.stages.model.fingerprint_fields import Field, Parallel

# the inferred config's rows: the fields a catalog model is compared on, then the profile-only ones
FIELD_ORDER = (*COMPARED_FIELDS, "qk_head_dim", "vocab_size_or_lm_head_shard", "parameters_lower_bound")


def _first_evidence(evidence: list[dict]) -> dict:
    return evidence[0] if evidence else {}


def _rank_row(item: dict) -> str | None:
    return f"r{item['rank_id']}:row{item['row']}" if "rank_id" in item else None


def inferred_config_table(fp: Fingerprint) -> pd.DataFrame:
    rows = []
    for key in FIELD_ORDER:
        found = fp.fields.get(key)
        if found is None:
            rows.append(
                {
                    "field": key,
                    "value": None,
                    "confidence": "none",
                    "method": "not visible in the kernels",
                    "evidence_kernel": None,
                    "evidence_shapes": None,
                    "evidence_rank_row": None,
                    "evidence_id": None,
                    "note": None,
                }
            )
            continue
        item = _first_evidence(found.evidence)
        rows.append(
            {
                "field": key,
                "value": None if found.value is None else str(found.value),
                "confidence": found.confidence,
                "method": found.method,
                "evidence_kernel": item.get("kernel"),
                "evidence_shapes": item.get("shapes"),
                "evidence_rank_row": _rank_row(item),
                "evidence_id": item.get("evidence_id"),
                "note": found.note or None,
            }
        )
    return pd.DataFrame(rows)


def feature_table(fp: Fingerprint) -> pd.DataFrame:
    rows = []
    for feature, found in fp.features.items():
        item = _first_evidence(found["evidence"])
        present = found["present"]
        rows.append(
            {
                "feature": feature,
                "present": "unknown" if present is None else "yes" if present else "no",
                "confidence": found["confidence"],
                "method": found["method"],
                "call_count": found["call_count"],
                "evidence_kernel": item.get("kernel"),
                "evidence_rank_row": _rank_row(item),
                "evidence_id": item.get("evidence_id"),
            }
        )
    return pd.DataFrame(rows)


def attention_kind(fp: Fingerprint) -> str:
    for kind in ("mla", "linear_attention", "gqa", "mqa", "mha"):
        if fp.features.get(kind, {}).get("present"):
            return "linear" if kind == "linear_attention" else kind
    return "unknown"


def layer_type_table(layer_classes: pd.DataFrame, fp: Fingerprint) -> pd.DataFrame:
    if layer_classes.empty:
        return pd.DataFrame()
    kinds = layer_classes["block_kinds"].fillna("")
    layer_type = np.where(kinds.str.contains("moe"), "moe", np.where(kinds.str.contains("ffn"), "dense", "other"))
    attention = np.where(kinds.str.contains("attention"), attention_kind(fp), "none")
    return pd.DataFrame(
        {
            "layer_class_id": layer_classes["layer_class_id"],
            "layer_type": layer_type,
            "attention_kind": attention,
            "block_kinds": layer_classes["block_kinds"],
            "member_count": layer_classes["member_count"],
            "rank_count": layer_classes["rank_count"],
            "wall_ms_mean": layer_classes["wall_ms_mean"],
        }
    )


def _parameters_lower_bound(fp: Fingerprint, values: dict) -> None:
    config = {**values, "mla": bool(fp.features.get("mla", {}).get("present")), "tie_word_embeddings": True}
    table = parameter_estimate(config)
    if table.empty:
        return
    parts = table[table["component"] != "total"]["component"].tolist()
    fp.fields["parameters_lower_bound"] = Field(
        int(table["parameters"].iloc[-1]),
        "low",
        f"decoder formulas over the inferred fields ({', '.join(parts)}); fields not visible count zero, "
        "embeddings counted once",
    )


def _model_config_path(model_config: str | None, root: str | None) -> Path | None:
    if model_config:
        return Path(model_config)
    if root and (Path(root) / "config.json").is_file():
        return Path(root) / "config.json"
    return None


def _capture_devices(capture: dict) -> list[str]:
    return sorted({name for rank in capture.get("ranks", []) for name in (rank.get("npu_names") or [])})


def _hardware_rows(hw: Hardware) -> tuple[pd.DataFrame, pd.DataFrame]:
    summary = [
        {"field": "name", "value": hw.name or "unknown", "source": hw.how},
        {"field": "chosen_by", "value": hw.how, "source": "npuprof"},
        {"field": "capture_devices", "value": ";".join(hw.capture_devices) or None, "source": "profiler db NPU_INFO"},
        {"field": "candidates", "value": ";".join(hw.candidates) or None, "source": "knowledge/hardware_profiles.yaml"},
    ]
    for key, value in hw.facts.items():
        if value is not None:
            summary.append({"field": key, "value": str(value), "source": hw.sources.get("cube_tflops")})
    peaks = []
    for dtype, value in sorted(hw.cube_tflops.items()):
        factor = hw.sustained.get(f"cube.{dtype}")
        peaks.append(
            {
                "unit": "cube",
                "dtype": dtype,
                "theoretical": value,
                "measure": "TFLOPS",
                "sustained_factor": factor,
                "sustained": value * factor if factor else None,
                "source": hw.sources.get("cube_tflops"),
            }
        )
    if hw.vector_tflops:
        factor = hw.sustained.get("vector")
        peaks.append(
            {
                "unit": "vector",
                "dtype": "fp16",
                "theoretical": hw.vector_tflops,
                "measure": "TOPS",
                "sustained_factor": factor,
                "sustained": hw.vector_tflops * factor,
                "source": hw.sources.get("vector_tflops"),
            }
        )
    if hw.hbm_gbps:
        factor = hw.sustained.get("hbm")
        peaks.append(
            {
                "unit": "hbm",
                "dtype": None,
                "theoretical": float(hw.hbm_gbps),
                "measure": "GB/s",
                "sustained_factor": factor,
                "sustained": hw.hbm_gbps * factor,
                "source": hw.sources.get("hbm_gbps"),
            }
        )
    return pd.DataFrame(summary), pd.DataFrame(peaks)


def _candidates(fp: Fingerprint, values: dict, model_id: str | None) -> tuple[pd.DataFrame, str | None, str | None]:
    """(ranked catalog candidates, the best one, the family the user named)."""
    family = model_id if model_id and model_id not in catalog_module.catalog() else None
    members = catalog_module.family_members(family) if family else None
    candidates = catalog_module.rank_candidates(values, fp.features, members)
    if not fp.transformer["present"]:  # a CNN matches every catalog model on the few fields it shows
        return candidates.iloc[0:0], None, family
    return candidates, catalog_module.best_model(candidates), family


def _config_views(path: Path, values: dict, tp: int | None) -> tuple[dict, dict]:
    """The config.json comparison views and their brief."""
    raw = read_input_json(path)
    if not isinstance(raw, dict):
        raise BadInput(path, "model config is not a JSON object")
    config = normalized_config(raw)
    problem = count_problem(config)
    if problem is not None:
        raise BadInput(path, f"model config {problem}")
    config = {k: int(v) if k in COUNT_FIELDS and v is not None else v for k, v in config.items()}
    overview = config_overview(config, values)
    views = {
        schema.MODEL_CONFIG_OVERVIEW_CSV: overview,
        schema.MODEL_PARAMETER_ESTIMATE_CSV: parameter_estimate(config),
        schema.MODEL_KV_CACHE_ESTIMATE_CSV: kv_cache_estimate(config, tp),
    }
    brief = {
        "path": str(path),
        "mismatches": overview[overview["agreement"] == "mismatch"]["field"].tolist() if len(overview) else [],
        "matches": int((overview["agreement"] == "match").sum()) if len(overview) else 0,
    }
    return views, brief


def _hardware_document(hw: Hardware, mfu: pd.Series) -> dict:
    return {
        "name": hw.name,
        "chosen_by": hw.how,
        "capture_devices": hw.capture_devices,
        "candidates": hw.candidates,
        "cube_tflops": hw.cube_tflops,
        "vector_tflops": hw.vector_tflops,
        "hbm_gbps": hw.hbm_gbps,
        "sustained_factors": hw.sustained,
        "sources": hw.sources,
        "facts": hw.facts,
        "mfu": {
            "dtype": hw.facts.get("mfu_dtype"),
            "step_count": int(len(mfu)),
            "mean": float(mfu.mean()) if len(mfu) else None,
            "p50": float(mfu.median()) if len(mfu) else None,
            "max": float(mfu.max()) if len(mfu) else None,
        },
        "note": "an analysis host is not proof of the capture host; peaks describe the named SoC",
        "limitations": hw.limitations,
    }


def _efficiency_views(
    shapes: pd.DataFrame, step_flops: pd.DataFrame, accounting: pd.DataFrame, options, capture: dict
) -> tuple[dict, Hardware, pd.Series]:
    """Hardware tables, operator roofline and step MFU; the hardware and the steps' MFU."""
    hw = choose(options.hardware_model, options.hardware_profile, options.cann_hardware_scan, _capture_devices(capture))
    hw.facts["mfu_dtype"] = main_dtype(shapes) if len(shapes) else None
    summary, peaks = _hardware_rows(hw)
    steps = step_efficiency(step_flops, accounting, hw)
    views = {
        schema.HARDWARE_SUMMARY_CSV: summary,
        schema.HARDWARE_THEORETICAL_PEAKS_CSV: peaks,
        schema.OPERATOR_EFFICIENCY_SUMMARY_CSV: operator_efficiency(shapes, hw) if len(shapes) else pd.DataFrame(),
        schema.STEP_EFFICIENCY_CSV: steps,
    }
    return views, hw, steps["mfu"].dropna() if len(steps) else pd.Series(dtype=float)


def _hardware_limitations(hw: Hardware, mfu: pd.Series) -> list[str]:
    """What the hardware choice leaves unknown or implausible."""
    found = list(hw.limitations)
    if not hw.resolved:
        found.append("hardware unknown: FLOPs are kept, MFU and roofline are not computed")
    if (mfu > 1).any():
        found.append(
            f"MFU above 1 on {int((mfu > 1).sum())} rank-steps: the chosen peaks ({hw.name}) or the shape FLOPs do "
            "not describe this capture — check --hardware-model"
        )
    return found


def model_context(
    shapes: pd.DataFrame,
    step_flops: pd.DataFrame,
    accounting: pd.DataFrame,
    layer_classes: pd.DataFrame,
    segment_manifest: dict,
    capture: dict,
    options,
    root: str | None,
) -> tuple[dict, dict, dict]:
    """(csv views, json files, manifest part) of the model and hardware context of one root."""
    parallel = Parallel.from_capture(capture)
    fp = infer(shapes, parallel, segment_manifest.get("layer_validation") or {})
    values = {k: f.value for k, f in fp.fields.items()}
    _parameters_lower_bound(fp, values)
    candidates, best, family = _candidates(fp, values, options.model_id)
    limitations: list[str] = []
    if not fp.transformer["present"]:
        limitations.append(f"not read as a transformer: {fp.transformer['method']}; no catalog model is named")
    elif family and best is None:
        limitations.append(f"--model-id {family}: the profile does not single out one variant of the family")
    views = {
        schema.MODEL_INFERRED_CONFIG_CSV: inferred_config_table(fp),
        schema.MODEL_FEATURE_SUMMARY_CSV: feature_table(fp),
        schema.MODEL_LAYER_TYPE_SUMMARY_CSV: layer_type_table(layer_classes, fp),
        schema.MODEL_CANDIDATE_SUMMARY_CSV: candidates,
    }
    config_brief = None
    path = _model_config_path(options.model_config, root)
    if path is not None:
        config_views, config_brief = _config_views(path, values, parallel.tp)
        views.update(config_views)
    efficiency_views, hw, mfu = _efficiency_views(shapes, step_flops, accounting, options, capture)
    views.update(efficiency_views)
    limitations += _hardware_limitations(hw, mfu)
    insights = {
        "fingerprint": {k: fp.fields[k].as_dict() for k in FIELD_ORDER if k in fp.fields},
        "features": fp.features,
        "transformer": fp.transformer,
        "parallel": vars(parallel),
        "candidates": candidates.head(5).to_dict("records") if len(candidates) else [],
        "best_candidate": best,
        "model_id": options.model_id,
        "family": family,
        "config": config_brief,
        "limitations": limitations,
    }
    hardware = _hardware_document(hw, mfu)
    manifest = {
        "best_candidate": best,
        "hardware": hw.name,
        "hardware_chosen_by": hw.how,
        "mfu_mean": hardware["mfu"]["mean"],
        "limitations": limitations,
    }
    return views, {schema.MODEL_INSIGHTS: insights, schema.HARDWARE_INSIGHTS: hardware}, manifest
