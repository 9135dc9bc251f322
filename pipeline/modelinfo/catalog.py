"""Rank known models (knowledge/model_catalog.yaml) by agreement with the profile's fingerprint."""

from __future__ import annotations

import pandas as pd

from npuprof import knowledge

# config fields a profile can show, compared when both sides know them
COMPARED_FIELDS = (
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "n_shared_experts",
    "kv_lora_rank",
    "qk_rope_head_dim",
)
COMPARED_FEATURES = {"qk_norm": "qk_norm", "mla": "mla", "moe": "kind"}


def catalog() -> dict[str, dict]:
    return knowledge.load("model_catalog")["models"]


def family_members(name: str) -> list[str]:
    """The catalog models of a family name (case-insensitive), empty when ``name`` is not a family."""
    wanted = name.lower()
    return [model for model, entry in catalog().items() if str(entry.get("family", "")).lower() == wanted]


def _profile_features(features: dict) -> dict:
    found = {}
    for feature, key in COMPARED_FEATURES.items():
        present = features.get(feature, {}).get("present")
        if present is None:
            continue
        found[key] = ("moe" if present else "dense") if feature == "moe" else bool(present)
    return found


def rank_candidates(values: dict, features: dict, only: list[str] | None = None) -> pd.DataFrame:
    """One row per catalog model: matched / mismatched fields, ranked by fewest mismatches, then most matches.

    ``values``: inferred field → value (None when unknown); ``features``: the fingerprint's features.
    A model with no mismatch is a candidate; the first with strictly more matches than the next is
    ``best``; any mismatch rules a model out. ``only`` restricts the ranking to some models (a family).
    """
    observed = {k: v for k, v in values.items() if k in COMPARED_FIELDS and v is not None}
    observed_features = _profile_features(features)
    rows = []
    for model, entry in catalog().items():
        if only is not None and model not in only:
            continue
        matched, mismatched = [], []
        for key, value in observed.items():
            if key in entry:
                (matched if entry[key] == value else mismatched).append((key, value, entry[key]))
        for key, value in observed_features.items():
            expected = entry.get(key, False if key in ("qk_norm", "mla") else None)
            if expected is not None:
                (matched if expected == value else mismatched).append((key, value, expected))
        rows.append(
            {
                "model": model,
                "family": entry.get("family"),
                "matched_count": len(matched),
                "mismatched_count": len(mismatched),
                "compared_count": len(matched) + len(mismatched),
                "matched_fields": ";".join(k for k, _, _ in matched),
                "mismatched_fields": ";".join(f"{k}={p}/{c}" for k, p, c in mismatched),
                "source": f"huggingface.co/{entry['source']}" if entry.get("source") else None,
            }
        )
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    table = table.sort_values(["mismatched_count", "matched_count", "model"], ascending=[True, False, True])
    table = table.reset_index(drop=True)
    table.insert(0, "rank", range(1, len(table) + 1))
    status = ["ruled_out" if m else "candidate" for m in table["mismatched_count"]]
    clean = table[table["mismatched_count"] == 0]
    if len(clean) and clean["matched_count"].iloc[0] > 0:
        runner_up = clean["matched_count"].iloc[1] if len(clean) > 1 else -1
        if clean["matched_count"].iloc[0] > runner_up:
            status[clean.index[0]] = "best"
    table.insert(3, "status", status)
    return table


def best_model(candidates: pd.DataFrame) -> str | None:
    best = candidates[candidates["status"] == "best"] if len(candidates) else candidates
    return str(best["model"].iloc[0]) if len(best) else None
