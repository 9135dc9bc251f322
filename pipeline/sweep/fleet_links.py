"""Fleet link suspects: links slow again and again across a sweep's captures.

Each root lists its links with their bandwidth over the median of their comparable links
(``root_tables.link_rows``). Here the links are named by what they join in the fleet — the host and card
at each end and the transport — so that the same physical link is one row whatever rank ids the jobs
that used it gave its ends, and a link is a suspect when it is low in ``min_flagged`` of the captures
it carries traffic in (``sweep_rules.yaml fleet_links``). A slow card is the card view's business
(``fleet.fleet_suspects``): a link is judged by transfer bandwidth alone, which a slow card's compute
does not lower.
"""

from __future__ import annotations

import pandas as pd

from npuprof import knowledge
from npuprof.pipeline.sweep.fleet import flagged_again

LINK = ["host_a", "device_a", "host_b", "device_b", "transport"]
LINK_SUSPECT_COLUMNS = [
    *LINK,
    "appearances",
    "flagged",
    "flagged_share",
    "cohorts",
    "bandwidth_ratio_median",
    "summary",
    "roots",
]


def _located_links(links: pd.DataFrame, ranks: pd.DataFrame) -> pd.DataFrame:
    """Each root's links with the host and card at each end, the two ends in one order (a link is the
    same whichever way its traffic went); links with an end of unknown place are dropped."""
    places = ranks.dropna(subset=["host_name", "device_id"])[["slug", "rank_id", "host_name", "device_id"]]
    places = places.assign(device_id=places["device_id"].astype(int), rank_id=places["rank_id"].astype(int))
    ends = links.assign(src_rank=links["src_rank"].astype(int), dst_rank=links["dst_rank"].astype(int))
    for end in ("src", "dst"):
        named = places.rename(
            columns={"rank_id": f"{end}_rank", "host_name": f"{end}_host", "device_id": f"{end}_device"}
        )
        ends = ends.merge(named, on=["slug", f"{end}_rank"])
    first = (ends["src_host"] < ends["dst_host"]) | (
        (ends["src_host"] == ends["dst_host"]) & (ends["src_device"] <= ends["dst_device"])
    )
    ends["host_a"] = ends["src_host"].where(first, ends["dst_host"])
    ends["device_a"] = ends["src_device"].where(first, ends["dst_device"])
    ends["host_b"] = ends["dst_host"].where(first, ends["src_host"])
    ends["device_b"] = ends["dst_device"].where(first, ends["src_device"])
    return ends


def fleet_link_suspects(links: pd.DataFrame, ranks: pd.DataFrame, cohorts: pd.DataFrame) -> pd.DataFrame:
    """fleet_link_suspects.csv: the links low against their comparable links in capture after capture,
    most flagged first; each with the roots that show it and how many cohorts (jobs) they span."""
    rules = knowledge.load("sweep_rules")["fleet_links"]
    judged = links[links["comparable_links"].astype(float) >= int(rules["min_comparable"])]
    if judged.empty or ranks.empty:
        return pd.DataFrame(columns=LINK_SUSPECT_COLUMNS)
    located = _located_links(judged, ranks)
    # per capture, the link's lowest ratio over its directions, roles and op kinds
    per_root = located.groupby([*LINK, "slug"], as_index=False)["bandwidth_ratio"].min()
    per_root["low"] = per_root["bandwidth_ratio"] <= float(rules["bandwidth_ratio_max"])
    per_root["cohort_id"] = per_root["slug"].map(cohorts.set_index("slug")["cohort_id"])
    low = per_root[per_root["low"]]
    table = per_root.groupby(LINK).agg(appearances=("slug", "nunique"))
    table["flagged"] = low.groupby(LINK)["slug"].nunique().reindex(table.index).fillna(0).astype(int)
    table["flagged_share"] = (table["flagged"] / table["appearances"]).round(4)
    table["cohorts"] = low.groupby(LINK)["cohort_id"].nunique().reindex(table.index).fillna(0).astype(int)
    table["bandwidth_ratio_median"] = low.groupby(LINK)["bandwidth_ratio"].median().reindex(table.index).round(4)
    table["roots"] = low.groupby(LINK)["slug"].agg(lambda s: ";".join(sorted(set(s)))).reindex(table.index)
    suspects = flagged_again(table, rules)
    if suspects.empty:
        return pd.DataFrame(columns=LINK_SUSPECT_COLUMNS)
    suspects["summary"] = [
        rules["text"]
        .format(
            src=f"host {row.host_a} device {row.device_a}",
            dst=f"host {row.host_b} device {row.device_b}",
            transport=row.transport,
            ratio=row.bandwidth_ratio_median,
            flagged=row.flagged,
            appearances=row.appearances,
            cohorts=row.cohorts,
        )
        .strip()
        for row in suspects.itertuples(index=False)  # suspects: few
    ]
    order = ["flagged", "flagged_share", "host_a", "device_a"]
    ordered = suspects.sort_values(order, ascending=[False, False, True, True])
    return ordered[LINK_SUSPECT_COLUMNS].reset_index(drop=True)
