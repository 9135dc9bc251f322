"""communication.json's numbers per op, as the time accounting reads them: what each transport moved and
how long it took (``op_size_mb``, ``op_transfer_ms``), and the transfer / wait / idle share of each
communication event's time (``communication_parts``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

COMM_PARTS = ("transfer", "wait", "idle", "unsplit")


LINK_TIME_COLUMNS = ("rdma_time_ms", "hccs_time_ms", "pcie_time_ms", "sdma_time_ms", "sio_time_ms")
LINK_SIZE_COLUMNS = ("rdma_size_mb", "hccs_size_mb", "pcie_size_mb", "sdma_size_mb", "sio_size_mb")


def op_size_mb(ops: pd.DataFrame) -> pd.DataFrame:
    """Per op of ``communication_ops``, what its busiest transport moved (``size_mb``: SDMA and HCCS count
    one transfer twice, so not the sum) and that transport (``transport``: RDMA, HCCS, ...; None where no
    transport recorded a size)."""
    present = [c for c in LINK_SIZE_COLUMNS if c in ops]
    if not present:
        return pd.DataFrame({"size_mb": np.nan, "transport": None}, index=ops.index)
    sizes = ops[present].apply(pd.to_numeric, errors="coerce").to_numpy(float)
    moved = np.where(sizes > 0, sizes, -1.0)  # NaN and 0: moved nothing
    recorded = (moved > 0).any(axis=1)
    names = np.array([c.split("_")[0].upper() for c in present], dtype=object)
    return pd.DataFrame(
        {
            "size_mb": np.where(recorded, moved.max(axis=1), np.nan),
            "transport": np.where(recorded, names[moved.argmax(axis=1)], None),
        },
        index=ops.index,
    )


def op_transfer_ms(ops: pd.DataFrame) -> pd.Series:
    """Per op of ``communication_ops``, its time in transit: communication.json's Transit Time, or where
    that is 0 while its transports moved data (a reduce-scatter over SDMA / HCCS is recorded so) the
    longest time one transport spent moving it (SDMA and HCCS count one transfer twice), at most the op's
    idle time. A recorded transit stands: the bandwidth table sums transfers that run side by side on
    several channels (an all-reduce of 2.5 ms shows 15 ms of HCCS time)."""
    transit = ops["transit_ms"].fillna(0).clip(lower=0)
    present = [c for c in LINK_TIME_COLUMNS if c in ops]
    if not present:
        return transit
    moved = ops[present].apply(pd.to_numeric, errors="coerce").max(axis=1).fillna(0.0).clip(lower=0.0)
    idle = ops["idle_ms"].fillna(0).clip(lower=0) if "idle_ms" in ops else pd.Series(0.0, index=ops.index)
    return transit + moved.where(transit == 0, 0.0).clip(upper=idle)


def _step_keys(step_ids: pd.Series) -> np.ndarray:
    """Step ids as join keys: a missing one (a capture that marks no step, whose communication.json holds
    one "step" key) is -1 on both sides."""
    return pd.to_numeric(step_ids, errors="coerce").fillna(-1).astype("int64").to_numpy()


def communication_parts(events: pd.DataFrame, ops: pd.DataFrame, step_ids: pd.Series) -> pd.DataFrame:
    """Per event of ``events`` (its index), the shares of its elapsed time its op spent in transit
    ("transfer": its Transit Time, or its transports' time moving data where that is 0), waiting for
    its peers ("wait": wait and synchronization) and neither ("idle"), from communication.json; "unsplit"
    1.0 for a communication event without such numbers, 0 for the rest.

    ``ops``: step_id, op_name, elapse_ms, transit_ms, wait_ms, idle_ms (``communication_ops``);
    ``step_ids``: step_id by step_ordinal."""
    shares = pd.DataFrame(0.0, index=events.index, columns=list(COMM_PARTS))
    comm = events[events["is_comm"].to_numpy(bool) & events["step_ordinal"].notna().to_numpy()]
    if not len(comm):
        return shares
    key = pd.DataFrame(
        {
            "step_id": _step_keys(step_ids.reindex(comm["step_ordinal"].astype("int64"))),
            "op_name": comm["name"].to_numpy(),
        },
        index=comm.index,
    )
    known = ops.dropna(subset=["transit_ms"]) if len(ops) and "transit_ms" in ops else pd.DataFrame()
    if len(known):
        transfer = op_transfer_ms(known)
        idle = known["idle_ms"].fillna(0).clip(lower=0)
        moved = transfer - known["transit_ms"].clip(lower=0)  # taken from its idle
        parts = (
            known[["op_name"]]
            .assign(
                step_id=_step_keys(known["step_id"]),
                transfer=transfer,
                wait=known["wait_ms"].fillna(0).clip(lower=0),
                idle=idle - moved,
            )
            .drop_duplicates(["step_id", "op_name"])
        )
        joined = key.reset_index().merge(parts, on=["step_id", "op_name"], how="left").set_index("index")
        total = joined[["transfer", "wait", "idle"]].sum(axis=1)
        matched = total > 0
        for part in ("transfer", "wait", "idle"):
            shares.loc[joined.index[matched], part] = (joined.loc[matched, part] / total[matched]).to_numpy()
        unmatched = joined.index[~matched]
    else:
        unmatched = comm.index
    shares.loc[unmatched, "unsplit"] = 1.0
    return shares
