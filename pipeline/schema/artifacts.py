"""File names of the JSON documents and other artifacts of one output dir, a sweep archive, and the
service (docs/architecture.md, "The stages"). Tables and CSV views are declared in their family modules."""

from __future__ import annotations

# one root
SOURCE_INDEX = "source_index.json"  # normalize: every source file by source_id, the discovered layout
CAPTURE_INFO = "capture_info.json"  # normalize: how each rank was captured
CLASS_SIGNATURES = "class_signatures.json"  # classify: every step / layer / block class
TOP_MANIFEST = "manifest.json"  # version, options, stage timings, input facts
FAILURE_JSON = "failure.json"  # only after a failure
RUN_LOCK = ".npuprof.lock"  # flock-ed by the run that writes the dir
DIAGNOSIS_FINDINGS = "diagnosis_findings.json"
EVIDENCE_DIR = "evidence"
BUBBLE_WINDOWS_JSONL = f"{EVIDENCE_DIR}/bubble_windows.jsonl"  # every idle window, with its kernels
REPORT_DIR = "report"
ANALYSIS_SUMMARY = f"{REPORT_DIR}/analysis_summary.json"
REPORT_MD = f"{REPORT_DIR}/report.md"
REPORT_TRACE = f"{REPORT_DIR}/trace.json"  # Chrome trace / Perfetto, all ranks
REPORT_CITED_EVIDENCE = f"{REPORT_DIR}/cited_evidence.csv"  # every evidence row a finding cites
REPORT_XLSX = f"{REPORT_DIR}/report.xlsx"  # full mode
REPORT_HTML = f"{REPORT_DIR}/report.html"
REPORT_MANIFEST = f"{REPORT_DIR}/manifest.json"  # what the report stage wrote, and the root's status

# a sweep archive
SWEEP_ROLLUP = "sweep_class_rollup.csv"
SWEEP_SUMMARY = "sweep_summary.json"
ROLLUP_ROW_CACHE = "rollup_row.json"  # one root's rollup row, beside its outputs
SERVICE_SWEEP_MARK = ".npuprof-service-sweep.json"  # the service sweep writing the archive, while it runs
SWEEP_COHORTS = "sweep_cohorts.csv"  # one row per cohort: its roots and baseline
SWEEP_COHORT_BASELINES = "sweep_cohort_baselines.csv"  # per cohort × class / operator / collective: median, spread
SWEEP_OUTLIERS = "sweep_outliers.csv"  # roots off their cohort, by metric, with what moved
FLEET_SUSPECTS = "fleet_suspects.csv"  # machines' cards that findings name again and again
FLEET_LINK_SUSPECTS = "fleet_link_suspects.csv"  # links slow against their peers capture after capture
SWEEP_TRENDS = "sweep_trends.csv"  # change points in a cohort's series
SWEEP_REPORT_HTML = "sweep_report.html"
SWEEP_DATA_DIR = "sweep_data"  # the sweep as Parquet datasets (one file per table) for DuckDB and friends

# a comparison of two analyzed outputs (npuprof compare)
COMPARE_OVERVIEW = "compare_overview.csv"
COMPARE_STEP_CLASSES = "compare_step_classes.csv"
COMPARE_LAYER_CLASSES = "compare_layer_classes.csv"
COMPARE_BLOCK_CLASSES = "compare_block_classes.csv"
COMPARE_OPERATORS = "compare_operators.csv"
COMPARE_COMMUNICATION = "compare_communication.csv"
COMPARE_FINDINGS = "compare_findings.json"
COMPARE_SUMMARY = "compare_summary.json"
COMPARE_MD = "compare.md"
COMPARE_HTML = "compare.html"  # the two timelines of one step class, aligned at the step start
COMPARE_SERIES = "compare_series.csv"  # npuprof compare --sweep: one row per root × class / operator / collective
