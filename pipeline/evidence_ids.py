"""How evidence is named: the ids findings cite and evidence_index.csv resolves (a rank's steps, idle
windows, operator rows and communication events). Summarize, the evidence stage, the detectors and
compare all write or read these ids; one definition keeps them the same text."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

# Evidence ids number a rank's steps by ordinal (0, 1, ... in capture order): "#" marks the ordinal
# everywhere (``r0.step#1``), so it is never read as the captured step id (``step 11``) the texts use.
STEP_ORDINAL = ".step#"


def texts(*parts: object) -> np.ndarray | pd.api.extensions.ExtensionArray:
    """Element-wise concatenation of text constants and columns (numbers as their Arrow text), as the
    column a frame makes of those strings: pandas' text array straight from Arrow (a NumPy array of
    Python strings would be checked again, string by string, when put in a frame); no rows, the empty
    object array."""
    columns = [
        pa.scalar(part, pa.string()) if isinstance(part, str) else pc.cast(pa.array(np.asarray(part)), pa.string())
        for part in parts
    ]
    joined = pc.binary_join_element_wise(*columns, "")
    return joined.to_pandas().array if len(joined) else np.asarray([], dtype=object)


def step_evidence_id(rank_id: int, step_ordinal: int) -> str:
    """The evidence id of one step window (the same text ``_step_rows`` writes)."""
    return f"r{int(rank_id)}{STEP_ORDINAL}{int(step_ordinal)}"


def operator_evidence_ids(rank_id: int, count: int) -> np.ndarray:
    """Evidence ids of a rank's operator rows, in table order: ``r<rank>.op<k>``."""
    return texts(f"r{rank_id}.op", np.arange(count, dtype=np.int64))


def communication_evidence_ids(rank_id: int, rows: np.ndarray) -> np.ndarray:
    """Evidence ids of a rank's communication events, by source row: ``r<rank>.comm<row>``."""
    return texts(f"r{rank_id}.comm", np.asarray(rows, dtype=np.int64))
