"""What chosen framework ops put on the device: each kernel (and collective) the host launched inside a
span of an op whose name holds one of ``evidence_rules.framework_scopes`` (SyncBatchNorm's forward, autograd's
SyncBatchNormBackward), matched through the kernel's launch flow."""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof import knowledge
from npuprof.pipeline import schema


def scope_spans(host: pd.DataFrame) -> pd.DataFrame:
    """The host events whose name holds a configured scope (the first that matches names it): scope, name,
    start_us, end_us, in start order."""
    scopes = [str(s) for s in knowledge.load("evidence_rules").get("framework_scopes", [])]
    names = host["name"].astype(str).str.lower()
    scope = pd.Series(None, index=host.index, dtype=object)
    for name in reversed(scopes):  # the first configured scope that matches wins
        scope = scope.mask(names.str.contains(name.lower(), regex=False), name)
    spans = host.assign(scope=scope).dropna(subset=["scope"])
    return spans[["scope", "name", "start_us", "end_us"]].sort_values("start_us", kind="stable", ignore_index=True)


def scoped_launches(events: pd.DataFrame, launch_us: np.ndarray, host: pd.DataFrame) -> pd.DataFrame:
    """Per kernel of ``events`` (row_idx, start_ns, name, step_ordinal; ``launch_us``: its launch, NaN when
    unknown) launched inside a scope span: the span (the latest starting one holding the launch) and the
    kernel (LAUNCH_SCOPES' columns)."""
    spans = scope_spans(host)
    launched = events.assign(launch_us=launch_us).dropna(subset=["launch_us"])
    if not len(spans) or not len(launched):
        return pd.DataFrame(columns=list(schema.LAUNCH_SCOPES.columns))  # the writer gives it the schema's types
    placed = pd.merge_asof(
        launched.sort_values("launch_us"), spans, left_on="launch_us", right_on="start_us", direction="backward"
    )
    placed = placed[(placed["launch_us"] <= placed["end_us"]) & (placed["step_ordinal"] >= 0)]
    return pd.DataFrame(
        {
            "step_ordinal": placed["step_ordinal"].to_numpy(np.int64),
            "scope": placed["scope"].to_numpy(object),
            "span_start_ns": np.round(placed["start_us"].to_numpy(float) * 1000).astype(np.int64),
            "span_end_ns": np.round(placed["end_us"].to_numpy(float) * 1000).astype(np.int64),
            "row_idx": placed["row_idx"].to_numpy(np.int64),
            "start_ns": placed["start_ns"].to_numpy(np.int64),
            "name": placed["name_x"].to_numpy(object),
        }
    ).sort_values("start_ns", kind="stable", ignore_index=True)
