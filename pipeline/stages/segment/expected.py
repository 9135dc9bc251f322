"""The expected decoder-layer count: from a config.json or the model catalog, never from a guess."""

from __future__ import annotations

from pathlib import Path

from npuprof import knowledge
from npuprof.pipeline.errors import BadInput, UsageError
from npuprof.pipeline.input_files import read_input_json
from npuprof.pipeline.modelinfo.configs import count_problem, is_whole, normalized_config


def expected_model(model_config: str | None, model_id: str | None, root: str) -> dict:
    """{expected_layers, source, detail}: config.json given > config.json in the root > catalog entry > unknown."""
    candidates = [Path(model_config)] if model_config else []
    if not candidates and (Path(root) / "config.json").is_file():
        candidates = [Path(root) / "config.json"]
    for path in candidates:
        if not path.is_file():
            raise BadInput(path, "model config not found")
        config = read_input_json(path)
        if not isinstance(config, dict):
            raise BadInput(path, "model config is not a JSON object")
        problem = count_problem(normalized_config(config))  # the model stage reads the same fields
        if problem is not None:
            raise BadInput(path, f"model config {problem}")
        layers, mtp = config.get("num_hidden_layers"), config.get("num_nextn_predict_layers") or 0
        if not isinstance(layers, int) or layers <= 0:
            raise BadInput(path, "config has no positive integer num_hidden_layers")
        if not is_whole(mtp) or not 0 <= mtp <= layers:
            raise BadInput(path, f"model config field num_nextn_predict_layers is {mtp!r}, not 0 to {layers}")
        return {"expected_layers": layers, "source": "config", "detail": str(path), "mtp_layers": int(mtp)}
    if model_id:
        catalog = knowledge.load("model_catalog")["models"]
        families = sorted({str(e.get("family")) for e in catalog.values() if e.get("family")})
        if model_id.lower() in families:
            # a family names no layer count: summarize's fingerprint picks the variant, segment does not guess
            return {"expected_layers": None, "source": "unknown", "detail": f"family {model_id}", "mtp_layers": 0}
        if model_id not in catalog:
            raise UsageError(
                f"--model-id {model_id!r} is not in the model catalog; known models: {', '.join(sorted(catalog))}; "
                f"families: {', '.join(families)}"
            )
        entry = catalog[model_id]
        return {
            "expected_layers": entry["num_hidden_layers"],
            "source": "catalog",
            "detail": model_id,
            "mtp_layers": int(entry.get("num_nextn_predict_layers", 0)),
        }
    return {"expected_layers": None, "source": "unknown", "detail": None, "mtp_layers": 0}


def layer_validation(
    expected: dict, ranks: list[dict], pipeline_stages: int | None, pp_groups: dict[int, tuple[str, int]] | None = None
) -> dict:
    """Compare observed layers per pass (× pipeline stages) with the expected count.

    ``pp_groups``: rank → (its PP group, its stage), where the capture names them: a group's total is
    then the sum over its stages, so an uneven split (the last stage one layer fewer, to make room for
    the LM head) counts right; otherwise every stage is taken to hold what each rank shows."""
    observed = {r["rank_id"]: r["decoder_layers_observed"] for r in ranks if r["decoder_layers_observed"]}
    stages = pipeline_stages or 1
    totals = sorted({v * stages for v in observed.values()})
    if pp_groups and all(rank in pp_groups for rank in observed):
        per_stage: dict[str, dict[int, set[int]]] = {}
        for rank, layers in observed.items():
            group, stage = pp_groups[rank]
            per_stage.setdefault(group, {}).setdefault(stage, set()).add(layers)
        if all(len(held) == 1 for group in per_stage.values() for held in group.values()):
            totals = sorted({sum(next(iter(held)) for held in group.values()) for group in per_stage.values()})
    result = {
        "expected_layers": expected["expected_layers"],
        "expected_source": expected["source"],
        "expected_detail": expected["detail"],
        "pipeline_stages": stages,
        "observed_layers_per_rank": {str(k): v for k, v in observed.items()},
        "observed_total_layers": totals,
        "per_rank_consistent": len(set(observed.values())) <= 1,
    }
    if expected["expected_layers"] is None or not observed:
        result["status"] = "unknown"
    elif totals == [expected["expected_layers"]]:
        result["status"] = "ok"
    else:
        result["status"] = "mismatch"
    return result
