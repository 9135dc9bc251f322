"""The fleet view: findings joined across a sweep's roots by the machine and card each rank ran on.

A card (host name × device id) is a suspect when the findings of ``sweep_rules.yaml fleet`` name it in
at least ``min_flagged`` of the captures it appears in, and in ``min_flagged_share`` of them: one slow
capture is a finding of that capture, repetition is what makes the card suspect.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from npuprof import knowledge


def fleet_columns() -> list[str]:
    """fleet_suspects.csv's columns: a count per finding type of ``sweep_rules.yaml fleet``."""
    counts = [spec["column"] for spec in knowledge.load("sweep_rules")["fleet"]["finding_types"].values()]
    return [
        "host_name",
        "device_id",
        "appearances",
        "flagged",
        "flagged_share",
        *counts,
        "aicore_freq_mhz_median",
        "summary",
        "roots",
        "finding_ids",
    ]


def _flags(findings: pd.DataFrame, types: list[str]) -> pd.DataFrame:
    """One row per (root, rank, finding) of the fleet's finding types, with its AI Core clock if said."""
    if findings.empty:
        return pd.DataFrame(columns=["slug", "rank_id", "finding_type", "finding_id"]).assign(
            freq_mhz=pd.Series(dtype=float)
        )
    chosen = findings[findings["finding_type"].isin(types)].copy()
    chosen["rank_id"] = chosen["rank_ids"].fillna("").astype(str).str.split(";")
    chosen = chosen.explode("rank_id")
    chosen = chosen[chosen["rank_id"].str.fullmatch(r"\d+", na=False)]
    chosen["rank_id"] = chosen["rank_id"].astype(int)
    # float even when no flag says a clock: an empty or all-null mapped column would read back as text
    chosen["freq_mhz"] = chosen["metrics"].map(_freq_mhz).astype(float)
    return chosen[["slug", "rank_id", "finding_type", "finding_id", "freq_mhz"]]


def _freq_mhz(metrics: object) -> float:
    try:
        value = json.loads(metrics).get("freq_mhz") if isinstance(metrics, str) else None
    except (ValueError, AttributeError):
        return np.nan
    return float(value) if isinstance(value, int | float) else np.nan


def _summary(row: pd.Series, types: dict[str, dict]) -> str:
    """ "host h, device d: " and each flagging type's words (sweep_rules.yaml fleet finding_types text)."""
    median = row["aicore_freq_mhz_median"]
    clock = f"{median:,.0f} MHz" if pd.notna(median) else "throttled"
    parts = [
        spec["text"].format(count=row[spec["column"]], appearances=row["appearances"], clock=clock)
        for spec in types.values()
        if row[spec["column"]]
    ]
    return f"host {row['host_name']}, device {row['device_id']}: " + ", ".join(parts)


def flagged_again(table: pd.DataFrame, rules: dict) -> pd.DataFrame:
    """The rows of ``table`` (appearances, flagged, flagged_share per thing) flagged again and again:
    in ``min_appearances`` captures at least, flagged in ``min_flagged`` and in ``min_flagged_share``
    of them — one capture's finding is that capture's, repetition makes a fleet suspect."""
    return table[
        (table["appearances"] >= int(rules["min_appearances"]))
        & (table["flagged"] >= int(rules["min_flagged"]))
        & (table["flagged_share"] >= float(rules["min_flagged_share"]))
    ].reset_index()


def fleet_suspects(ranks: pd.DataFrame, findings: pd.DataFrame) -> pd.DataFrame:
    """fleet_suspects.csv: the cards findings name again and again, most flagged first; each with the
    roots (slugs) and finding ids that support it. Ranks with no host name or device id are not joined."""
    rules = knowledge.load("sweep_rules")["fleet"]
    located = ranks.dropna(subset=["host_name", "device_id"])
    if located.empty:
        return pd.DataFrame(columns=fleet_columns())
    located = located.assign(device_id=located["device_id"].astype(int))
    types = rules["finding_types"]
    flags = _flags(findings, list(types)).merge(
        located[["slug", "rank_id", "host_name", "device_id"]], on=["slug", "rank_id"]
    )
    card = ["host_name", "device_id"]
    appearances = located.groupby(card)["slug"].nunique().rename("appearances")
    flagged_roots = flags.groupby(card)["slug"].nunique().rename("flagged")
    by_type = flags.pivot_table(index=card, columns="finding_type", values="slug", aggfunc="nunique")
    table = pd.concat([appearances, flagged_roots], axis=1).fillna({"flagged": 0}).astype({"flagged": int})
    for finding_type, spec in types.items():
        counted = by_type.get(finding_type, pd.Series(dtype=float)).reindex(table.index)
        table[spec["column"]] = counted.fillna(0).astype(int)
    table["aicore_freq_mhz_median"] = flags.groupby(card)["freq_mhz"].median().reindex(table.index)
    table["flagged_share"] = table["flagged"] / table["appearances"]
    table["roots"] = flags.groupby(card)["slug"].agg(lambda s: ";".join(sorted(set(s)))).reindex(table.index)
    table["finding_ids"] = (
        flags.groupby(card)["finding_id"].agg(lambda s: ";".join(sorted(set(s)))).reindex(table.index)
    )
    suspects = flagged_again(table, rules)
    if suspects.empty:
        return pd.DataFrame(columns=fleet_columns())
    suspects["summary"] = suspects.apply(_summary, axis=1, types=types)
    suspects["flagged_share"] = suspects["flagged_share"].round(4)
    return suspects.sort_values(["flagged", "flagged_share", "host_name"], ascending=[False, False, True])[
        fleet_columns()
    ]
