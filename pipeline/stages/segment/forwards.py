"""Per rank of an inference capture: what each forward's batch was — prefill, decode, mixed or dummy, its
tokens (T) and requests (B) — read from its attention calls' input slots (knowledge/serving_rules.yaml),
with the rows that say so; how it ran — replayed from a captured graph or eager —, read from its
kernels' Model ID; and the device's wall and the gap before it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof import knowledge
from npuprof.pipeline.distinct import combined_codes, first_rows
from npuprof.pipeline.modelinfo.shapes import Shape, parse_shapes

UNKNOWN = "unknown"


def _slot(shapes: list[Shape | None], index: int) -> Shape | None:
    return shapes[index] if index < len(shapes) else None


def batch_of(input_shapes: object) -> tuple[str, int | None, int | None, str]:
    """(phase, tokens, requests, note) one attention call's input shapes say; the phase ``unknown`` with
    the note saying what is missing."""
    rules = knowledge.load("serving_rules")["forward_labels"]
    slots = rules["slots"]
    shapes = parse_shapes(input_shapes)
    query, lengths = _slot(shapes, slots["query"]), _slot(shapes, slots["actual_seq_lengths"])
    if query is None or len(query) != 3:
        return UNKNOWN, None, None, "no 3-D query shape"
    head_dims = set(knowledge.load("model_shapes")["head_dims"])
    tnd = query[-1] in head_dims and query[-2] <= rules["max_heads"]
    tokens = query[0] if tnd else query[0] * query[1]
    requests = (lengths[0] if lengths and len(lengths) == 1 else None) if tnd else query[0]
    if requests is None:
        return UNKNOWN, tokens, None, "no actual_seq_lengths slot: the requests are not in the shapes"
    paged = _slot(shapes, slots["block_table"]) is not None
    if not paged:
        return "prefill", tokens, requests, ""
    return ("decode" if tokens == requests else "mixed"), tokens, requests, ""


def forward_summary(events: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame | None:
    """One row per step of ``steps`` (a forward): its label from the attention calls among ``events``
    (device order, with ``step_ordinal``, ``type``, ``input_shapes``, ``row_idx``, ``model_id``,
    ``samples``), its span and the device's idle before it since the previous forward ended. None when
    no forward calls such an attention (not a serving capture: a prefill benchmark, a CNN)."""
    types = knowledge.load("serving_rules")["forward_labels"]["attention_types"]
    in_step = events["step_ordinal"].notna().to_numpy()
    is_call = events["type"].isin(types).to_numpy() & in_step
    if not is_call.any():
        return None
    size = int(steps["step_ordinal"].max()) + 1
    step = events["step_ordinal"].to_numpy()
    frame = steps[["step_ordinal", "step_id", "row_start", "row_end", "start_ns", "end_ns"]].reset_index(drop=True)
    ordinal = frame["step_ordinal"].to_numpy(np.int64)
    labels = _labels(events.loc[is_call], size)
    for column, values in labels.items():
        frame[column] = values[ordinal]
    own = step[in_step].astype(np.int64)
    samples = np.bincount(own, weights=events["samples"].to_numpy()[in_step], minlength=size)
    replayed = events["model_id"].notna().to_numpy()
    graph = np.bincount(own, weights=replayed[in_step], minlength=size).astype(np.int64)
    attention_replayed = np.zeros(size, dtype=bool)
    attention_replayed[step[is_call & replayed].astype(np.int64)] = True
    frame["graph_kernels"] = graph[ordinal]
    frame["graph_mode"] = np.where(
        attention_replayed[ordinal], "full", np.where(frame["graph_kernels"] > 0, "piecewise", "eager")
    )
    _mark_dummies(frame, samples[ordinal] > 0)
    _unpad_full_graphs(frame, _sampled_requests(events.loc[in_step & events["samples"].to_numpy()], size)[ordinal])
    frame["wall_us"] = (frame["end_ns"] - frame["start_ns"]) / 1e3
    frame["gap_before_us"] = (frame["start_ns"] - frame["end_ns"].shift(1)) / 1e3
    return frame


def _labels(calls: pd.DataFrame, size: int) -> dict[str, np.ndarray]:
    """Per step ordinal (``size`` of them): what its attention calls (``calls``, device order) say — the
    first call's reading where every call reads the same, else ``unknown`` and why."""
    codes, distinct = combined_codes([calls["input_shapes"]])  # each distinct shape text is read once
    read = [batch_of(text) for (text,) in distinct]
    reading = pd.factorize(pd.Series([r[:3] for r in read], dtype=object))[0][codes]
    step = calls["step_ordinal"].to_numpy().astype(np.int64)
    count = np.bincount(step, minlength=size)
    has = count > 0
    first = np.where(has, first_rows(step, size), 0)  # the first call of each step (device order)
    disagree = np.bincount(step, weights=reading != reading[first[step]], minlength=size) > 0
    code = codes[first]
    phase = np.array([r[0] for r in read], dtype=object)[code]
    note = np.array([r[3] for r in read], dtype=object)[code]
    rows = calls["row_idx"].to_numpy(np.int64)
    row_min, row_max = np.full(size, np.iinfo(np.int64).max), np.full(size, -1, dtype=np.int64)
    np.minimum.at(row_min, step, rows)
    np.maximum.at(row_max, step, rows)
    known = has & ~disagree
    return {
        "phase": np.where(known, phase, UNKNOWN),
        "tokens": _present(pd.array([r[1] for r in read], dtype="Int64").take(code), known),
        "requests": _present(pd.array([r[2] for r in read], dtype="Int64").take(code), known),
        "attention_type": np.where(has, calls["type"].to_numpy(object)[first], None),
        "attention_calls": count.astype(np.int64),
        "evidence_row_start": _present(row_min, has),
        "evidence_row_end": _present(row_max, has),
        "note": np.where(
            ~has, "no attention call in the forward", np.where(disagree, "its attention calls disagree", note)
        ),
    }


def _present(values: np.ndarray | pd.api.extensions.ExtensionArray, has: np.ndarray) -> pd.array:
    """``values`` (one per step) where ``has``, null elsewhere."""
    found = pd.array(values, dtype="Int64")
    found[~has] = pd.NA
    return found


def _sampled_requests(sampling: pd.DataFrame, size: int) -> pd.array:
    """Per step ordinal: the first dim of the first input of its first selection or sampling kernel (the
    logits' rows: one per request sampled), null where it has none or its shape is missing."""
    found = pd.array([pd.NA] * size, dtype="Int64")
    if sampling.empty:
        return found
    codes, distinct = combined_codes([sampling["input_shapes"]])
    shapes = [parse_shapes(text) for (text,) in distinct]
    rows = pd.array([s[0][0] if s and s[0] else pd.NA for s in shapes], dtype="Int64")
    step = sampling["step_ordinal"].to_numpy().astype(np.int64)
    first = first_rows(step, size)
    has = first < len(step)
    found[has] = rows.take(codes[first[has]])
    return found


def _unpad_full_graphs(frame: pd.DataFrame, sampled: pd.array) -> None:
    """A decode replayed from a full graph runs its layers on the batch size the graph was captured for, so
    its attention reads the padded batch (T = B = the captured size); the LM head and sampling run eager
    after the replay on the real requests. Where they sample fewer than the attention read, the real
    requests (one token each) are the sampled rows and the rest is ``padded_tokens``; 0 where the batch
    was the captured size; null where it cannot be told (not a full-graph decode, no sampled rows)."""
    tokens = frame["tokens"].array
    told = (frame["graph_mode"].to_numpy() == "full") & (frame["phase"].to_numpy() == "decode")
    told &= ~pd.isna(sampled) & ~pd.isna(tokens)
    told = np.asarray(told, dtype=bool)
    told[told] = np.asarray(sampled[told] <= tokens[told], dtype=bool)
    padded = pd.array([pd.NA] * len(frame), dtype="Int64")
    padded[told] = tokens[told] - sampled[told]
    frame["sampled_requests"] = sampled
    frame["padded_tokens"] = padded
    for column in ("tokens", "requests"):
        values = frame[column].array.copy()
        values[told] = sampled[told]
        frame[column] = values


def _mark_dummies(frame: pd.DataFrame, sampled: np.ndarray) -> None:
    """A forward that ran the layers and sampled nothing (no LM head's selection or sampling kernel) on a
    rank whose other forwards sample is a ``dummy``: a data-parallel rank without requests keeping its
    expert exchanges in step (vLLM's _dummy_run). Its tokens and requests stay as its shapes say (the
    padding it ran); a rank that never samples (a pipeline stage before the last) has no dummies."""
    dummy = ~sampled & sampled.any() & (frame["attention_calls"].to_numpy() > 0)
    frame["phase"] = np.where(dummy, "dummy", frame["phase"])
    frame["note"] = np.where(dummy, "no LM head or sampling: a dummy forward", frame["note"])
