"""compare.html: the two timelines of one step class, baseline above new, aligned at the step start,
each kernel coloured by its operator's change (gain, regression, unchanged).

One self-contained file that opens from file://. Names from the data go in as JSON (with ``<``, ``>``
and ``&`` escaped) and reach the page only through ``textContent``: nothing from a capture is markup.
"""

from __future__ import annotations

import pandas as pd

from npuprof.pipeline import io, schema
from npuprof.pipeline.compare.sides import OPERATOR_KEY, Side
from npuprof.pipeline.evidence_ids import step_evidence_id

MAX_KERNELS = 20_000  # per side: one step of one rank


def _representative(side: Side, class_id: str) -> pd.Series | None:
    """The instance of the class with the median wall (rank, step) — typical, not an outlier."""
    members = side.steps[side.steps["step_class_id"] == class_id].sort_values("wall_ms", kind="stable")
    return None if members.empty else members.iloc[len(members) // 2]


def _kernels(side: Side, step: pd.Series) -> pd.DataFrame:
    table = io.read_dataset(
        side.out_dir,
        schema.NORMALIZED_EVENTS,
        int(step["rank_id"]),
        columns=[*OPERATOR_KEY, "type", "start_ns", "duration_ns"],
    ).to_pandas()
    inside = (table["start_ns"] >= step["start_ns"]) & (table["start_ns"] < step["end_ns"])
    kernels = table[inside].sort_values("start_ns").head(MAX_KERNELS)
    return kernels.assign(
        offset_us=(kernels["start_ns"] - step["start_ns"]) / 1000.0, duration_us=kernels["duration_ns"] / 1000.0
    )


def _verdicts(operators: pd.DataFrame) -> dict[tuple, str]:
    """Operator key → gain | regression | unchanged | one_side (communication kernels: not_compared)."""
    verdict = {}
    for row in operators.itertuples(index=False):  # distinct operators stay few
        key = (
            row.name,
            row.input_shapes if isinstance(row.input_shapes, str) else "",
            row.output_shapes if isinstance(row.output_shapes, str) else "",
        )
        if row.status == "changed":
            verdict[key] = "gain" if row.per_step_delta_ms < 0 else "regression"
        else:
            verdict[key] = "unchanged" if row.status == "no_significant_change" else "one_side"
    return verdict


def _lane(kernels: pd.DataFrame, verdicts: dict) -> list[list]:
    """[name, type, offset µs, duration µs, verdict] per kernel, built column-wise."""
    texts = {column: kernels[column].fillna("").astype(str) for column in (*OPERATOR_KEY, "type")}
    keys = list(zip(*(texts[column] for column in OPERATOR_KEY)))
    verdict = [verdicts.get(key, "not_compared") for key in keys]
    offsets = kernels["offset_us"].to_numpy(float).round(3).tolist()
    durations = kernels["duration_us"].to_numpy(float).round(3).tolist()
    return [list(row) for row in zip(texts["name"].tolist(), texts["type"].tolist(), offsets, durations, verdict)]


def compare_html(base: Side, new: Side, tables: dict[str, pd.DataFrame], summary: dict) -> str:
    """The page (a note instead of timelines when no step class is on both sides)."""
    classes = tables[schema.COMPARE_STEP_CLASSES]
    shared = classes[~classes["status"].isin(["only_in_baseline", "only_in_new"])] if len(classes) else classes
    data: dict = {"headline": summary["headline"], "baseline": str(base.out_dir), "new": str(new.out_dir)}
    if len(shared):
        chosen = shared.iloc[0]
        verdicts = _verdicts(tables[schema.COMPARE_OPERATORS])
        lanes = {}
        for label, side in (("baseline", base), ("new", new)):
            step = _representative(side, chosen["step_class_id"])
            kernels = _kernels(side, step)
            lanes[label] = {
                "rank_id": int(step["rank_id"]),
                "step_id": int(step["step_id"]),
                "evidence": step_evidence_id(step["rank_id"], step["step_ordinal"]),
                "wall_us": float(step["end_ns"] - step["start_ns"]) / 1000.0,
                "kernels": _lane(kernels, verdicts),
            }
        data.update(
            step_class_id=chosen["step_class_id"],
            status=chosen["status"],
            lanes=lanes,
            median_ratio=None if pd.isna(chosen["median_ratio"]) else float(chosen["median_ratio"]),
        )
    payload = io.json_text(data).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return TEMPLATE.replace("__DATA__", payload)


TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>npuprof compare</title>
<style>
body { font: 13px system-ui, sans-serif; margin: 16px; color: #222; }
.lane-label { font-weight: 600; }
rect.gain { fill: #2a9d4a; } rect.regression { fill: #d1495b; } rect.unchanged { fill: #9aa5b1; }
rect.one_side { fill: #e9a23b; } rect.not_compared { fill: #cfd8e3; }
svg { border: 1px solid #ddd; background: #fafafa; }
.legend span { display: inline-block; margin-right: 12px; }
.swatch { width: 10px; height: 10px; display: inline-block; }
</style></head>
<body>
<h1>npuprof compare</h1>
<p id="verdict"></p>
<p id="class"></p>
<div class="legend"><span><i class="swatch" style="background:#2a9d4a"></i> faster</span>
<span><i class="swatch" style="background:#d1495b"></i> slower</span>
<span><i class="swatch" style="background:#9aa5b1"></i> no significant change</span>
<span><i class="swatch" style="background:#e9a23b"></i> on one side only</span>
<span><i class="swatch" style="background:#cfd8e3"></i> communication (see compare_communication.csv)</span></div>
<svg id="timelines" width="1200" height="170" xmlns="http://www.w3.org/2000/svg"></svg>
<script type="application/json" id="data">__DATA__</script>
<script>
(function () {
  const data = JSON.parse(document.getElementById("data").textContent);
  const wall = data.headline.step_wall_ms;
  document.getElementById("verdict").textContent =
    data.headline.verdict + ": step wall " + wall.baseline + " → " + wall.new + " ms (" + wall.delta + " ms per step), "
    + data.headline.significant_changes + " significant changes";
  const svg = document.getElementById("timelines");
  if (!data.lanes) {
    document.getElementById("class").textContent = "No step class runs on both sides: no timelines to align.";
    return;
  }
  document.getElementById("class").textContent = "Step class " + data.step_class_id + " (" + data.status
    + "), median instance of each side, aligned at the step start.";
  const ns = "http://www.w3.org/2000/svg";
  const width = 1200 - 165, span = Math.max(data.lanes.baseline.wall_us, data.lanes.new.wall_us) || 1;
  ["baseline", "new"].forEach(function (label, index) {
    const lane = data.lanes[label], y = 20 + index * 75;
    const group = document.createElementNS(ns, "g");
    group.setAttribute("class", "timeline");
    group.setAttribute("data-side", label);
    const text = document.createElementNS(ns, "text");
    text.setAttribute("x", 4); text.setAttribute("y", y + 28); text.setAttribute("class", "lane-label");
    text.textContent = label + " r" + lane.rank_id + " step " + lane.step_id;
    group.appendChild(text);
    lane.kernels.forEach(function (k) {
      const rect = document.createElementNS(ns, "rect");
      rect.setAttribute("x", 160 + k[2] / span * width);
      rect.setAttribute("y", y + 10);
      rect.setAttribute("width", Math.max(k[3] / span * width, 0.5));
      rect.setAttribute("height", 30);
      rect.setAttribute("class", "kernel " + k[4]);
      const title = document.createElementNS(ns, "title");
      title.textContent = k[1] + " — " + k[0] + " — " + k[3].toFixed(1) + " µs (" + k[4] + ")";
      rect.appendChild(title);
      group.appendChild(rect);
    });
    svg.appendChild(group);
  });
})();
</script>
</body></html>
"""
