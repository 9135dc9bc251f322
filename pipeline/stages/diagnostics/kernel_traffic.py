"""What a kernel moves through memory, from the shapes and dtypes the capture records: the traffic the
fusion detectors price a fused kernel by, and whether a kernel reads the tensor its predecessor wrote."""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline.modelinfo.shapes import parse_dtypes, parse_shapes, tensor_bytes

TRAFFIC_COLUMNS = ["input_shapes", "input_dtypes", "output_shapes", "output_dtypes"]
# bytes of every input, of the inputs but the first, of every output, of the first output
BYTE_KINDS = ("input_bytes", "later_input_bytes", "output_bytes", "first_output_bytes")


def _joined(frame: pd.DataFrame, columns: list[str]) -> pd.Series:
    """The columns' texts joined per row (one key per distinct combination)."""
    keys = frame[columns[0]].fillna("").astype(str)
    for column in columns[1:]:  # a loop over a few columns, each joined whole
        keys = keys + "\x1f" + frame[column].fillna("").astype(str)
    return keys


def kernel_traffic(frame: pd.DataFrame) -> pd.DataFrame:
    """Per kernel of ``frame`` (TRAFFIC_COLUMNS): BYTE_KINDS, NaN where a dtype is unknown; each distinct
    shape text parsed once."""
    codes, distinct = pd.factorize(_joined(frame, TRAFFIC_COLUMNS))
    sizes = []
    for key in distinct:  # a loop over distinct shapes
        in_shapes, in_dtypes, out_shapes, out_dtypes = key.split("\x1f")
        shapes, dtypes = parse_shapes(in_shapes), parse_dtypes(in_dtypes)
        outputs, output_dtypes = parse_shapes(out_shapes), parse_dtypes(out_dtypes)
        found = (
            tensor_bytes(shapes, dtypes),
            tensor_bytes(shapes[1:], dtypes[1:]),
            tensor_bytes(outputs, output_dtypes),
            tensor_bytes(outputs[:1], output_dtypes[:1]),
        )
        sizes.append([np.nan if v is None else v for v in found])
    table = np.array(sizes, dtype=float).reshape(-1, len(BYTE_KINDS))[codes]
    return pd.DataFrame(table, columns=list(BYTE_KINDS), index=frame.index)


def reads_previous_output(frame: pd.DataFrame) -> np.ndarray:
    """Per kernel of ``frame`` (in device order), whether one of its inputs has the shape and dtype of the
    previous kernel's first output: the evidence that it consumes what its predecessor wrote (False for
    the first kernel); each distinct pair of texts compared once."""
    linked = np.zeros(len(frame), dtype=bool)
    if len(frame) < 2:
        return linked
    previous = _joined(frame, ["output_shapes", "output_dtypes"]).to_numpy(object)[:-1]
    current = _joined(frame, ["input_shapes", "input_dtypes"]).to_numpy(object)[1:]
    codes, distinct = pd.factorize(pd.Series(previous) + "\x1e" + pd.Series(current))
    verdicts = np.array([_consumes(*pair.split("\x1e")) for pair in distinct], dtype=bool)  # distinct pairs
    linked[1:] = verdicts[codes] if len(distinct) else False
    return linked


def _consumes(previous: str, current: str) -> bool:
    """Whether the inputs in ``current`` (shapes \\x1f dtypes) hold the first output in ``previous``."""
    out_shapes, out_dtypes = previous.split("\x1f")
    in_shapes, in_dtypes = current.split("\x1f")
    outputs = parse_shapes(out_shapes)
    if not outputs or outputs[0] is None:
        return False
    written = (outputs[0], (parse_dtypes(out_dtypes) or [""])[0])
    dtypes = parse_dtypes(in_dtypes)
    return any(
        (shape, dtypes[i] if i < len(dtypes) else "") == written for i, shape in enumerate(parse_shapes(in_shapes))
    )
