"""The comparison tables: classes (step / layer / block), operators, collectives, and the overview.

Things are matched by what they are, never by position in time: classes by their class id (a hash
of the kernels and shapes they run), operators by name + shapes, collectives by kind + parallel
role. Something on one side only is listed as such, never paired with an unlike thing. Every row
carries per-step totals (the class's time per complete rank-step), the median per instance, the
test of the change and one evidence reference per side.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline.compare.sides import OPERATOR_KEY, Side, split_key
from npuprof.pipeline.compare.stats import change
from npuprof.pipeline.evidence_ids import step_evidence_id

DELTA_COLUMNS = [
    "status",  # changed | no_significant_change | only_in_baseline | only_in_new
    "base_count",
    "new_count",
    "base_median",
    "new_median",
    "median_delta",
    "median_ratio",
    "base_per_step_ms",
    "new_per_step_ms",
    "per_step_delta_ms",
    "p_value",
    "base_evidence",
    "new_evidence",
]


def _evidence(frame: pd.DataFrame) -> str | None:
    """``r<rank>.step#<ordinal> rows a-b`` of the first instance (resolves in evidence_index)."""
    if frame.empty:
        return None
    first = frame.iloc[0]
    rows = f" rows {int(first['row_start'])}-{int(first['row_end'])}" if "row_start" in frame else ""
    return f"{step_evidence_id(first['rank_id'], first['step_ordinal'])}{rows}"


def _groups(frame: pd.DataFrame, key: list[str]) -> dict:
    """Group key → row positions (no per-group DataFrame is built)."""
    if frame.empty:
        return {}
    groups = frame.groupby(key, sort=False, dropna=False).indices
    return {k if isinstance(k, tuple) else (k,): v for k, v in groups.items()}


def delta_rows(
    base: pd.DataFrame,
    new: pd.DataFrame,
    key: list[str],
    value: str,
    base_steps: int,
    new_steps: int,
    evidence=_evidence,
    per_step_scale: float = 1.0,
) -> pd.DataFrame:
    """One row per key present on either side: instance medians, per-step totals, the change test.

    ``value``: the per-instance column (ms or µs); ``per_step_scale`` turns its sums into ms.
    """
    base_groups, new_groups = _groups(base, key), _groups(new, key)
    base_values, new_values = base[value].to_numpy(float), new[value].to_numpy(float)
    rows = []
    for group_key in list(base_groups) + [k for k in new_groups if k not in base_groups]:  # keys stay few
        b, n = base_groups.get(group_key), new_groups.get(group_key)
        row = dict(zip(key, group_key))
        b_values = base_values[b] if b is not None else np.array([])
        n_values = new_values[n] if n is not None else np.array([])
        row["base_count"], row["new_count"] = len(b_values), len(n_values)
        row["base_per_step_ms"] = b_values.sum() * per_step_scale / base_steps
        row["new_per_step_ms"] = n_values.sum() * per_step_scale / new_steps
        row["per_step_delta_ms"] = row["new_per_step_ms"] - row["base_per_step_ms"]
        if b is None or n is None:
            row["status"] = "only_in_new" if b is None else "only_in_baseline"
            row["base_median"] = float(np.median(b_values)) if len(b_values) else None
            row["new_median"] = float(np.median(n_values)) if len(n_values) else None
        else:
            found = change(b_values, n_values)
            row.update(
                status="changed" if found.significant else "no_significant_change",
                base_median=found.base_median,
                new_median=found.new_median,
                median_delta=found.delta,
                median_ratio=found.ratio,
                p_value=found.p_value,
            )
        rows.append(row)
    table = pd.DataFrame(rows, columns=[*key, *DELTA_COLUMNS])
    keys = list(base_groups) + [k for k in new_groups if k not in base_groups]
    table["base_evidence"] = _first_evidence(base, base_groups, keys, evidence)
    table["new_evidence"] = _first_evidence(new, new_groups, keys, evidence)
    order = table["per_step_delta_ms"].abs().sort_values(ascending=False, kind="stable").index
    return table.loc[order].reset_index(drop=True)


def _first_evidence(frame: pd.DataFrame, groups: dict, keys: list, evidence) -> list:
    """The evidence of each key's first instance, from one positional take of those rows."""
    present = [k for k in keys if k in groups]
    firsts = frame.iloc[[int(groups[k][0]) for k in present]] if present else frame.iloc[:0]
    found = {k: evidence(firsts.iloc[i : i + 1]) for i, k in enumerate(present)}
    return [found.get(k) for k in keys]


def class_table(base: pd.DataFrame, new: pd.DataFrame, key: str, extra: list[str], sides: tuple[Side, Side]):
    """Step / layer / block classes: per-instance wall_ms, matched by class id."""
    table = delta_rows(base, new, [key], "wall_ms", sides[0].step_count, sides[1].step_count)
    if extra:
        labels = pd.concat([base[[key, *extra]], new[[key, *extra]]]).drop_duplicates(key)
        table = table.merge(labels, on=key, how="left")
        table = table[[key, *extra, *DELTA_COLUMNS]]
    return table


def operator_table(sides: tuple[Side, Side]) -> pd.DataFrame:
    """Operators matched by name + input / output shapes: per-call µs, per-step ms."""
    base, new = sides
    table = delta_rows(
        base.operator_calls,
        new.operator_calls,
        ["op_key"],
        "duration_us",
        base.step_count,
        new.step_count,
        evidence=lambda frame: None,
        per_step_scale=1e-3,
    )
    if table.empty:
        return table
    table = pd.concat([split_key(table["op_key"]), table.drop(columns="op_key")], axis=1)
    for column, side in (("base_evidence", base), ("new_evidence", new)):
        ops = side.operators.assign(**{k: side.operators[k].fillna("") for k in OPERATOR_KEY})
        ops = ops.sort_values(["rank_id", "row_start"]).drop_duplicates(OPERATOR_KEY)
        ops = ops[[*OPERATOR_KEY, "evidence_id", "type"]].rename(
            columns={"evidence_id": column, "type": f"{column}_type"}
        )
        table = table.drop(columns=column).merge(ops, on=OPERATOR_KEY, how="left")
    table["type"] = table["base_evidence_type"].fillna(table["new_evidence_type"])
    table = table[["name", "type", "input_shapes", "output_shapes", *DELTA_COLUMNS]]
    table = table.replace({"input_shapes": {"": None}, "output_shapes": {"": None}})
    order = table["per_step_delta_ms"].abs().sort_values(ascending=False, kind="stable").index
    return table.loc[order].reset_index(drop=True)


def communication_table(sides: tuple[Side, Side]) -> pd.DataFrame:
    """Collectives matched by kind + parallel role: transmit and wait per rank and step (communication.json's
    transit and wait where the capture has it, else the kernel's duration minus its stream wait).

    The instances tested are a rank's step, not single calls: a straggler makes its peers wait at the
    first collective after it and at none of the rest, so per call the median never moves while the
    time waited per step does."""
    frames = []
    keys = ["rank_id", "step_ordinal", "kind", "parallel_role"]
    for side in sides:
        comm = side.communication.copy()
        comm["parallel_role"] = comm["parallel_role"].fillna("unknown")
        comm = comm.rename(columns={"wait_us": "stream_wait_us", "member_wait_us": "wait_us"})
        per_step = comm.groupby(keys, sort=False).agg(
            transmit_us=("transmit_us", "sum"),
            wait_us=("wait_us", "sum"),
            evidence_id=("evidence_id", "first"),
            split_source=("split_source", "first"),
        )
        frames.append(per_step.reset_index())

    def evidence(frame: pd.DataFrame) -> str | None:
        return None if frame.empty else str(frame["evidence_id"].iloc[0])

    tables = []
    for part in ("transmit_us", "wait_us"):
        table = delta_rows(
            frames[0],
            frames[1],
            ["kind", "parallel_role"],
            part,
            sides[0].step_count,
            sides[1].step_count,
            evidence=evidence,
            per_step_scale=1e-3,
        )
        table.insert(2, "part", part.removesuffix("_us"))
        table["split_source"] = _split_sources(frames, table)
        tables.append(table)
    table = pd.concat(tables, ignore_index=True)
    order = table["per_step_delta_ms"].abs().sort_values(ascending=False, kind="stable").index
    return table.loc[order].reset_index(drop=True)


def _split_sources(frames: list[pd.DataFrame], table: pd.DataFrame) -> list[str]:
    """Per (kind, role) row: where both sides' transmit / wait split came from ("a | b" when they differ)."""
    found = []
    for row in table.itertuples():  # a loop over the few (kind, role) rows
        sources = set()
        for frame in frames:
            match = frame[(frame["kind"] == row.kind) & (frame["parallel_role"] == row.parallel_role)]
            sources |= set(match["split_source"])
        found.append(" | ".join(sorted(sources)))
    return found


def overview_table(sides: tuple[Side, Side]) -> pd.DataFrame:
    """Per rank and overall: step wall, then each accounting component (compute by bound family,
    communication by kind and by role, idle by window) — mean ms per complete step on each side."""
    rows = []
    for scope in ["all", *sorted(set(sides[0].steps["rank_id"]) | set(sides[1].steps["rank_id"]))]:
        means = []
        for side in sides:
            steps = side.steps if scope == "all" else side.steps[side.steps["rank_id"] == scope]
            parts = side.accounting if scope == "all" else side.accounting[side.accounting["rank_id"] == scope]
            count = max(len(steps), 1)
            figures = {("step", "wall", "wall_ms"): steps["wall_ms"].sum() / count}
            sums = parts.groupby(["breakdown", "category", "component"])["ms"].sum() / count
            figures.update(sums.to_dict())
            means.append(figures)
        for item in sorted(set(means[0]) | set(means[1])):
            b, n = means[0].get(item, 0.0), means[1].get(item, 0.0)
            rows.append(
                {
                    "rank_id": str(scope),
                    "breakdown": item[0],
                    "category": item[1],
                    "component": item[2],
                    "base_ms_per_step": b,
                    "new_ms_per_step": n,
                    "delta_ms": n - b,
                    "ratio": n / b if b else None,
                }
            )
    return pd.DataFrame(rows)
