"""diagnostics' tables: step anomalies, the step ledger, the critical path and the slow rank's diff
against its peers."""

from __future__ import annotations

import pyarrow as pa

from npuprof.pipeline.schema.table import CsvView, Table

# diagnostics' step tags: thresholds of diagnosis_rules.yaml (anomaly_tags) over the step measurements
STEP_ANOMALIES = Table(
    "step_anomalies",
    pa.schema(
        [
            ("rank_id", pa.int64()),
            ("step_ordinal", pa.int64()),
            ("step_id", pa.int64()),
            ("anomaly_tags", pa.string()),  # ';'-joined tags of knowledge/diagnosis_rules.yaml anomaly_tags
            ("anomaly_text", pa.string()),  # the tags' wording (their `text:` in diagnosis_rules.yaml), '; '-joined
        ]
    ),
    per_rank=False,
)
STEP_ANOMALIES_CSV = CsvView("step_anomalies.csv", (STEP_ANOMALIES,), ())
# diagnostics' account of every ms of each step (stages/diagnostics/ledger.py): the lines of one rank and step
# add up to its wall; each is explained by a finding, an expected reason, or is unexplained
STEP_LEDGER = Table(
    "step_ledger",
    pa.schema(
        [
            ("rank_id", pa.int64()),
            ("step_ordinal", pa.int64()),
            ("step_id", pa.int64()),
            ("complete", pa.bool_()),
            ("wall_ms", pa.float64()),
            ("category", pa.string()),  # compute | overlap | communication | idle
            ("line", pa.string()),  # 'compute attention', 'communication DP allreduce wait', 'idle launch' ...
            # a line a finding's fix shortens is split: the ms its replay removes (explained_by its claim_id)
            # and the rest, with its own reason; so a line may have several rows
            ("ms", pa.float64()),
            ("share", pa.float64()),  # of wall_ms
            # claim_id (what fixing it recovers) | cause:<claim_id> (its cause, not recoverable from this
            # capture) | expected:<reason> | unexplained
            ("explained_by", pa.string()),
            ("finding_type", pa.string()),  # the explaining finding's type (null: none)
            ("blamed_ranks", pa.string()),  # the ranks that finding names: a peer's wait is blamed on them
        ]
    ),
    per_rank=False,
)
STEP_LEDGER_CSV = CsvView("step_ledger.csv", (STEP_LEDGER,), ())
# diagnostics' critical path of each step across ranks (stages/diagnostics/critical_path.py): the segments,
# in order, that decide when the step ends — a rank's own work, a collective's transit after its
# last member arrived, the finishing rank's tail
CRITICAL_PATH = Table(
    "critical_path",
    pa.schema(
        [
            ("step_key", pa.int64()),  # the step's id (its ordinal for steps found by structure)
            ("position", pa.int64()),  # order along the path, from the step's start
            ("rank_id", pa.int64()),
            ("segment", pa.string()),  # work | transit | tail
            ("start_us", pa.float64()),  # on the common (corrected) clock
            ("end_us", pa.float64()),
            ("ms", pa.float64()),
            ("alignment_id", pa.string()),  # the collective (cross_rank_alignment) it leads into or is
        ]
    ),
    per_rank=False,
)
CRITICAL_PATH_CSV = CsvView("critical_path.csv", (CRITICAL_PATH,), ())
# diagnostics' comparison of each slow rank with its peers (stages/diagnostics/slow_card.py), per step
SLOW_RANK_DIFF = Table(
    "slow_rank_diff",
    pa.schema(
        [
            ("rank_id", pa.int64()),  # the slow rank
            ("peer_ranks", pa.string()),  # ' '-joined: the ranks its median is taken over
            ("level", pa.string()),  # step | time | operator | idle_cause | compute_work
            ("key", pa.string()),  # the measure: 'own time', a category, an operator name, 'Mcycles' ...
            ("value", pa.float64()),  # the slow rank's, per step (ms; compute_work Mcycles in millions)
            ("peer_median", pa.float64()),
            ("ratio", pa.float64()),  # value / peer_median (null where the peers have none)
            ("extra", pa.float64()),  # value - peer_median
            ("share_of_extra", pa.float64()),  # extra / the rank's extra own time per step
        ]
    ),
    per_rank=False,
)
SLOW_RANK_DIFF_CSV = CsvView("slow_rank_diff.csv", (SLOW_RANK_DIFF,), ())
