"""A model config.json against the profile: field agreement, parameter and KV-cache estimates."""

from __future__ import annotations

import pandas as pd

from npuprof.pipeline.modelinfo.catalog import COMPARED_FIELDS

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "int8": 1, "float8_e4m3fn": 1}


def _get(config: dict, *keys: str, default=None):
    for key in keys:
        value = config.get(key)
        if value is not None:
            return value
    return default


def is_whole(value: object) -> bool:
    """Whether a JSON value is a whole number (4096 or 4096.0; not True, "4096" or 4096.5)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def normalized_config(config: dict) -> dict:
    """Config fields under the names the fingerprint uses (head_dim filled in the usual ways)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    merged = {**text, **{k: v for k, v in config.items() if k != "text_config"}}
    heads = _get(merged, "num_attention_heads")
    hidden = _get(merged, "hidden_size")
    mla = merged.get("kv_lora_rank") is not None
    experts = _get(merged, "n_routed_experts", "num_experts", "num_local_experts")
    head_dim = _get(merged, "v_head_dim") if mla else _get(merged, "head_dim")
    if head_dim is None and is_whole(heads) and is_whole(hidden) and heads > 0:  # else count_problem names them
        head_dim = hidden // heads
    return {
        "num_hidden_layers": _get(merged, "num_hidden_layers", "num_layers"),
        "hidden_size": hidden,
        "intermediate_size": _get(merged, "intermediate_size", "ffn_hidden_size"),
        "num_attention_heads": heads,
        "num_key_value_heads": _get(merged, "num_key_value_heads", "num_query_groups", default=heads),
        "head_dim": head_dim,
        "vocab_size": _get(merged, "vocab_size", "padded_vocab_size"),
        "n_routed_experts": experts,
        "num_experts_per_tok": _get(merged, "num_experts_per_tok", "moe_topk", "top_k"),
        "moe_intermediate_size": _get(merged, "moe_intermediate_size"),
        "n_shared_experts": _get(merged, "n_shared_experts", default=0 if experts else None),
        "first_k_dense_replace": _get(merged, "first_k_dense_replace", default=0),
        "q_lora_rank": merged.get("q_lora_rank"),
        "kv_lora_rank": merged.get("kv_lora_rank"),
        "qk_rope_head_dim": merged.get("qk_rope_head_dim"),
        "qk_nope_head_dim": merged.get("qk_nope_head_dim"),
        "tie_word_embeddings": bool(merged.get("tie_word_embeddings", False)),
        "dtype_bytes": DTYPE_BYTES.get(str(merged.get("torch_dtype") or merged.get("dtype") or "bfloat16"), 2),
        "mla": mla,
    }


# the fields a config gives as counts and sizes, and the largest value any model has a use for (a
# hidden size or vocabulary of 2**31 is a broken file, and 10**400 would overflow every estimate)
COUNT_FIELDS = (*COMPARED_FIELDS, "first_k_dense_replace", "q_lora_rank", "qk_nope_head_dim")
MAX_COUNT = 2**31 - 1


def count_problem(config: dict) -> str | None:
    """What makes a normalized config unusable, or None: each count a whole number from 0 to MAX_COUNT
    (a string, a fraction, a boolean or 10**400 is named by its field)."""
    for field in COUNT_FIELDS:
        value = config.get(field)
        if value is None:
            continue
        if not is_whole(value) or not 0 <= value <= MAX_COUNT:
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "…"
            return f"field {field} is {shown}, not a whole number from 0 to {MAX_COUNT}"
    return None


def config_overview(config: dict, profile: dict) -> pd.DataFrame:
    """Per comparable field: the config's value, the profile's, and whether they agree."""
    rows = []
    for key in COMPARED_FIELDS:
        want, seen = config.get(key), profile.get(key)
        if want is None and seen is None:
            continue
        if want is None:
            agreement, note = "not_in_config", ""
        elif seen is None:
            agreement, note = "not_visible", "the kernels do not show this field"
        else:
            agreement, note = ("match", "") if want == seen else ("mismatch", "")
        rows.append(
            {
                "field": key,
                "config_value": None if want is None else str(want),
                "profile_value": None if seen is None else str(seen),
                "agreement": agreement,
                "note": note,
            }
        )
    return pd.DataFrame(rows)


def parameter_estimate(config: dict) -> pd.DataFrame:
    """Parameters by component from config fields (standard decoder formulas; biases left out)."""
    h, layers = config.get("hidden_size"), config.get("num_hidden_layers")
    if not h or not layers:
        return pd.DataFrame()
    heads, kv, hd = (
        config.get("num_attention_heads") or 0,
        config.get("num_key_value_heads") or 0,
        config.get("head_dim") or 0,
    )
    vocab = config.get("vocab_size") or 0
    experts = config.get("n_routed_experts") or 0
    dense_layers = min(config.get("first_k_dense_replace") or 0, layers) if experts else layers
    moe_layers = layers - dense_layers
    rows = []

    def add(component: str, per_layer: float, count: int, formula: str) -> None:
        rows.append(
            {
                "component": component,
                "parameters": float(per_layer * count),
                "per_layer": float(per_layer),
                "layers": count,
                "formula": formula,
            }
        )

    if config.get("mla"):
        q_lora, kv_lora = config.get("q_lora_rank"), config.get("kv_lora_rank") or 0
        rope = config.get("qk_rope_head_dim") or 0
        nope = config.get("qk_nope_head_dim") or hd
        qk = nope + rope
        q = h * q_lora + q_lora * heads * qk if q_lora else h * heads * qk
        attention = q + h * (kv_lora + rope) + kv_lora * heads * (nope + hd) + heads * hd * h
        add("attention (MLA)", attention, layers, "q (low-rank) + kv_a + kv_b + o projections")
    elif heads and hd:
        add("attention", h * heads * hd * 2 + 2 * h * kv * hd, layers, "h·(N·D) q and o + 2·h·(KV·D) k and v")
    if config.get("intermediate_size") and dense_layers:
        add("dense FFN", 3 * h * config["intermediate_size"], dense_layers, "3·h·I (gate, up, down)")
    if experts and moe_layers and config.get("moe_intermediate_size"):
        moe_i = config["moe_intermediate_size"]
        shared = config.get("n_shared_experts") or 0
        add("routed experts", experts * 3 * h * moe_i, moe_layers, "E·3·h·I_moe")
        if shared:
            add("shared experts", shared * 3 * h * moe_i, moe_layers, "shared·3·h·I_moe")
        add("router", h * experts, moe_layers, "h·E")
    add("norms", 2 * h, layers, "2·h per layer")
    if vocab:
        add("embedding", vocab * h, 1, "V·h")
        if not config.get("tie_word_embeddings"):
            add("lm head", vocab * h, 1, "V·h (untied)")
    table = pd.DataFrame(rows)
    total = {
        "component": "total",
        "parameters": float(table["parameters"].sum()),
        "per_layer": None,
        "layers": layers,
        "formula": "sum of the rows above",
    }
    return pd.concat([table, pd.DataFrame([total])], ignore_index=True)


def kv_cache_estimate(config: dict, tp: int | None) -> pd.DataFrame:
    """KV-cache bytes per token (all layers) and per 1k tokens, whole model and per TP rank."""
    layers = config.get("num_hidden_layers")
    dtype = float(config.get("dtype_bytes") or 2)
    if not layers:
        return pd.DataFrame()
    if config.get("mla") and config.get("kv_lora_rank"):
        per_layer = (config["kv_lora_rank"] + (config.get("qk_rope_head_dim") or 0)) * dtype
        kind, formula, split = "mla", "(kv_lora_rank + qk_rope_head_dim) · bytes, replicated on every TP rank", 1
    elif config.get("num_key_value_heads") and config.get("head_dim"):
        per_layer = 2 * config["num_key_value_heads"] * config["head_dim"] * dtype
        kind, formula = "kv_heads", "2 (K, V) · KV heads · head_dim · bytes, KV heads split over TP"
        split = min(tp or 1, config["num_key_value_heads"])
    else:
        return pd.DataFrame()
    per_token = per_layer * layers
    gib = per_token * 1000 / 2**30
    return pd.DataFrame(
        [
            {
                "attention_kind": kind,
                "dtype_bytes": dtype,
                "bytes_per_token_per_layer": per_layer,
                "bytes_per_token": per_token,
                "gib_per_1k_tokens": gib,
                "tp": tp or 1,
                "gib_per_1k_tokens_per_rank": gib / split,
                "formula": formula,
            }
        ]
    )
