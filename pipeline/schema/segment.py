"""segment's tables: steps and transformer layer instances of every rank.

Positions (``pos_start`` / ``pos_end``, inclusive) index the rank's events in device order (start
time, then source row). ``row_start`` / ``row_end`` are the source rows the window spans (the
evidence anchor), ``start_ns`` / ``end_ns`` its exact time span; ``start_us`` / ``end_us`` the same
as float µs for people.
"""

from __future__ import annotations

import pyarrow as pa

from npuprof.pipeline.schema.table import CsvView, Table

_S, _F, _I = pa.string(), pa.float64(), pa.int64()

# Evidence of a window of events: source rows and exact times it spans.
WINDOW_EVIDENCE: list[tuple[str, pa.DataType]] = [
    ("row_start", pa.int64()),
    ("row_end", pa.int64()),
    ("start_ns", pa.int64()),
    ("end_ns", pa.int64()),
    ("start_us", pa.float64()),
    ("end_us", pa.float64()),
]
# step_segments' start_source of an inference rank's forward found from structure: it starts where the
# rank's previous forward ended (segment's steps.forward_heads), its head the device's idle between them
AFTER_PREVIOUS_FORWARD = "previous forward"
STEP_SEGMENTS = Table(
    "step_segments",
    pa.schema(
        [
            ("step_ordinal", pa.int64()),
            ("step_id", pa.int64()),  # the capture's step id; null when steps come from structure
            ("source", pa.string()),  # step_id | structure | whole_capture
            ("complete", pa.bool_()),
            ("tags", pa.string()),
            ("pos_start", pa.int64()),
            ("pos_end", pa.int64()),
            ("event_count", pa.int64()),
            ("layer_count", pa.int64()),
            ("main_layer_count", pa.int64()),
            ("forward_layers", pa.int64()),
            ("backward_layers", pa.int64()),
            ("recompute_layers", pa.int64()),
            ("speculative_layers", pa.int64()),
            ("forward_passes", pa.int64()),
            ("layers_per_pass", pa.int64()),
            ("head_events", pa.int64()),
            ("tail_events", pa.int64()),
            ("interlude_events", pa.int64()),
            ("attention_family", pa.string()),
            ("layer_confidence", pa.string()),
            # the step starts where the profiler started it (start_ns / start_us): head_ms before its
            # first event, from start_source (null: at the first event, the export records no start)
            ("head_ms", pa.float64()),
            ("start_source", pa.string()),
            *WINDOW_EVIDENCE,
        ]
    ),
)
LAYER_SEGMENTS = Table(
    "layer_segments",
    pa.schema(
        [
            ("step_ordinal", pa.int64()),
            ("step_id", pa.int64()),
            ("layer_ordinal", pa.int64()),
            ("pass_index", pa.int64()),
            ("layer_index", pa.int64()),
            ("layer_role", pa.string()),  # forward | backward | recompute | speculative
            ("direction", pa.string()),  # forward | backward
            ("pos_start", pa.int64()),
            ("pos_end", pa.int64()),
            ("event_count", pa.int64()),
            ("anchor_pos", pa.int64()),  # position of the layer's anchor event (its attention core)
            ("anchor_name", pa.string()),
            ("attention_family", pa.string()),  # the family that anchored it; fallback_periodic: no attention
            ("boundary_source", pa.string()),
            *WINDOW_EVIDENCE,
        ]
    ),
)

# per rank of an inference capture: each forward (a step) with what its attention calls say its batch was
# (stages/model/forwards.py, knowledge/serving_rules.yaml)
FORWARD_SUMMARY = Table(
    "forward_summary",
    pa.schema(
        [
            ("step_ordinal", _I),
            ("step_id", _I),  # null in a serving capture: its forwards are found from the kernels
            ("phase", _S),  # prefill | decode | mixed | dummy | unknown
            ("tokens", _I),  # T: the tokens the forward computes
            ("requests", _I),  # B: the requests they belong to
            ("attention_type", _S),
            ("attention_calls", _I),
            ("evidence_row_start", _I),  # the attention calls' source rows
            ("evidence_row_end", _I),
            ("note", _S),  # why the phase is unknown
            ("graph_mode", _S),  # full | piecewise | eager: how it ran (its kernels' Model ID)
            ("graph_kernels", _I),  # its kernels replayed from a captured graph
            ("sampled_requests", _I),  # the rows its selection / sampling ran on (the logits of each request)
            ("padded_tokens", _I),  # a full-graph decode: the tokens it ran beyond its requests (graph padding)
            ("row_start", _I),  # the forward's rows and span
            ("row_end", _I),
            ("start_ns", _I),
            ("end_ns", _I),
            ("wall_us", _F),
            ("gap_before_us", _F),  # the device's time since the previous forward ended (null for the first)
        ]
    ),
)
FORWARD_SUMMARY_CSV = CsvView("forward_summary.csv", (FORWARD_SUMMARY,), ("rank_id", "step_ordinal"))
