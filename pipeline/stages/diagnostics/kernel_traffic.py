"""What a kernel moves through memory, from the shapes and dtypes the capture records: the traffic the
fusion detectors price a fused kernel by, and whether a kernel reads the tensor its predecessor wrote."""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline.distinct import combined_codes
from npuprof.pipeline.modelinfo.shapes import parse_dtypes, parse_shapes, tensor_bytes

TRAFFIC_COLUMNS = ["input_shapes", "input_dtypes", "output_shapes", "output_dtypes"]
# bytes of every input, of the inputs but the first, of every output, of the first output
BYTE_KINDS = ("input_bytes", "later_input_bytes", "output_bytes", "first_output_bytes")


def kernel_traffic(frame: pd.DataFrame) -> pd.DataFrame:
    """Per kernel of ``frame`` (TRAFFIC_COLUMNS): BYTE_KINDS, NaN where a dtype is unknown; each distinct
    shape text parsed once."""
    codes, distinct = combined_codes([frame[column] for column in TRAFFIC_COLUMNS])
    sizes = []
    for in_shapes, in_dtypes, out_shapes, out_dtypes in distinct:  # a loop over distinct shapes
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
    written, outputs = combined_codes([frame["output_shapes"], frame["output_dtypes"]])
    read, inputs = combined_codes([frame["input_shapes"], frame["input_dtypes"]])
    codes, distinct = pd.factorize(written[:-1] * len(inputs) + read[1:])  # (previous's output, own input)
    verdicts = [_consumes(outputs[pair // len(inputs)], inputs[pair % len(inputs)]) for pair in distinct.tolist()]
    linked[1:] = np.array(verdicts, dtype=bool)[codes] if len(distinct) else False
    return linked


def _consumes(previous: tuple[str, str], current: tuple[str, str]) -> bool:
    """Whether the inputs in ``current`` (shapes, dtypes) hold the first output in ``previous``."""
    out_shapes, out_dtypes = previous
    in_shapes, in_dtypes = current
    outputs = parse_shapes(out_shapes)
    if not outputs or outputs[0] is None:
        return False
    written = (outputs[0], (parse_dtypes(out_dtypes) or [""])[0])
    dtypes = parse_dtypes(in_dtypes)
    return any(
        (shape, dtypes[i] if i < len(dtypes) else "") == written for i, shape in enumerate(parse_shapes(in_shapes))
    )
