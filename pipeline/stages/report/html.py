"""report/report.html: a thin shell plus gzipped JSON assets loaded on demand.

The shell (``report_template.html``, package data) draws a zoomable multi-rank timeline on a canvas,
a findings list that jumps to each finding's evidence window, a single-step inspector and an
operator card. Assets are pre-aggregated: a coarse busy-share grid per (rank, stream) for wide views,
and raw kernels cut into time chunks fetched only when the view is narrow enough to show them. Every
string from the data reaches the page as JSON and is put into the DOM as text, never as markup. The
single-file variant inlines the assets (base64 of the same gzip) for ``file://`` use.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterable
from importlib import resources

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from npuprof.pipeline import schema
from npuprof.pipeline.io import json_text
from npuprof.pipeline.stages.diagnostics.findings import saves_nothing
from npuprof.pipeline.stages.report.glossary import GLOSSARY
from npuprof.pipeline.stages.report.ledger_view import ledger_bars
from npuprof.pipeline.stages.report.notes import remedy
from npuprof.pipeline.stages.report.perfetto import rebased_us
from npuprof.pipeline.stages.report.pp_chart import pp_chart
from npuprof.pipeline.summaries.communication import call_families

COARSE_BINS = 1500
CHUNKS = 64
MAX_KERNELS_PER_CHUNK = 60_000
MAX_BUBBLES = 20_000  # the longest idle windows drawn (all are in evidence/bubble_windows.jsonl)
ASSET_DIR = "assets"
TEMPLATE = "report_template.html"
ASSET_SLOT = "/*__NPUPROF_ASSETS__*/"


def _gz(payload: object) -> bytes:
    return gzip.compress(json_text(payload).encode("utf-8"), compresslevel=6, mtime=0)


def _relative(ns: pd.Series, rank: pd.Series, offsets_ns: dict[int, float], base_ns: int) -> np.ndarray:
    """perfetto's rebased µs, to the ns (the page's assets carry 3 decimals)."""
    return np.round(rebased_us(ns, rank, offsets_ns, base_ns), 3)


def _coarse(events: pd.DataFrame, start: np.ndarray, end: np.ndarray, span_us: float) -> dict:
    """Busy share of each (rank, stream) row in COARSE_BINS bins over the capture."""
    width = max(span_us / COARSE_BINS, 1e-3)
    first = np.clip((start // width).astype(np.int64), 0, COARSE_BINS - 1)
    last = np.clip((end // width).astype(np.int64), first, COARSE_BINS - 1)
    rows = events[["rank_id", "stream_id"]].fillna(-1).astype(np.int64)
    keys = rows["rank_id"].to_numpy() * 1_000_003 + rows["stream_id"].to_numpy()
    codes, uniques = pd.factorize(keys)
    busy = np.zeros((len(uniques), COARSE_BINS))
    # every bin a kernel overlaps gets the time it overlaps: its first and last bins their parts, the
    # bins between it fills (a difference array: one add at each end, one cumulative sum)
    same = first == last
    np.add.at(busy, (codes[same], first[same]), (end - start)[same])
    many = ~same
    np.add.at(busy, (codes[many], first[many]), ((first + 1) * width - start)[many])
    np.add.at(busy, (codes[many], last[many]), np.minimum(end - last * width, width)[many])
    between = np.zeros((len(uniques), COARSE_BINS + 1))
    np.add.at(between, (codes[many], first[many] + 1), width)
    np.add.at(between, (codes[many], last[many]), -width)
    busy += np.cumsum(between, axis=1)[:, :COARSE_BINS]
    lanes = rows.groupby(codes).first()  # lane k holds row k of busy
    # each lane is painted in the colour of the kernels that hold most of its time (a communication
    # stream in communication's, as the zoomed view paints its kernels)
    held = pd.DataFrame({"lane": codes, "kind": events["op_type"].fillna("").to_numpy(str), "us": end - start})
    held = held.groupby(["lane", "kind"], sort=False)["us"].sum().reset_index().sort_values("us", kind="stable")
    kinds = held.drop_duplicates("lane", keep="last").set_index("lane")["kind"].reindex(range(len(uniques)))
    return {
        "bin_us": width,
        "lanes": lanes.to_numpy().tolist(),
        "kinds": kinds.fillna("").tolist(),
        "busy": np.round(np.minimum(busy / width, 1.0), 3).tolist(),
    }


def _chunks(
    events: pd.DataFrame, start: np.ndarray, end: np.ndarray, span_us: float
) -> tuple[dict[int, dict], dict[int, np.ndarray]]:
    """Raw kernels per time chunk: [rank, stream, start, dur, name id, op_type id, row]; and the
    positions in ``events`` of each chunk's kernels, in the same order."""
    width = max(span_us / CHUNKS, 1e-3)
    chunk = np.clip((start // width).astype(np.int64), 0, CHUNKS - 1)
    names, name_ids = np.unique(events["name"].fillna("").to_numpy(str), return_inverse=True)
    kinds, kind_ids = np.unique(events["op_type"].fillna("").to_numpy(str), return_inverse=True)
    table = np.column_stack(
        [
            events["rank_id"].to_numpy(np.int64),
            events["stream_id"].fillna(-1).to_numpy(np.int64),
            start,
            np.round(end - start, 3),
            name_ids,
            kind_ids,
            events["row_idx"].fillna(-1).to_numpy(np.int64),
        ]
    )
    found, rows_of = {}, {}
    for index in np.unique(chunk):  # a loop over at most CHUNKS chunks
        rows_of[int(index)] = np.flatnonzero(chunk == index)[:MAX_KERNELS_PER_CHUNK]
        rows = table[rows_of[int(index)]]
        used = np.unique(rows[:, 4].astype(np.int64))
        remap = np.full(len(names), -1)
        remap[used] = np.arange(len(used))
        rows[:, 4] = remap[rows[:, 4].astype(np.int64)]
        found[int(index)] = {
            "names": names[used].tolist(),
            "families": call_families(pd.Series(names[used], dtype=object)).tolist(),  # how op_classes key them
            "kinds": kinds.tolist(),
            "kernels": rows.tolist(),
            "truncated": bool((chunk == index).sum() > MAX_KERNELS_PER_CHUNK),
            "index": int(index),  # its kernel_fields asset: the operator card's every field
            # where its latest kernel ends: a zoomed view inside a long collective that began in an
            # earlier chunk loads that chunk too, so the collective is drawn and clickable there
            "reach_us": float(end[rows_of[int(index)]].max()),
        }
    return found, rows_of


def kernel_fields(events: pd.DataFrame) -> dict:
    """Every normalized field of each kernel of one chunk, with its unit, for the operator card (only
    the fields the capture holds: empty columns are left out)."""
    shown = [c for c in schema.EVENT_COLUMNS if c in events and c not in ("rank_id",) and events[c].notna().any()]
    columns = []
    for name in shown:
        values = events[name]
        if name.endswith("_ns"):  # times as µs, as everywhere in the report
            columns.append((name[:-3] + "_us", "µs", (values.astype("float64") / 1000.0).round(3).tolist()))
        elif name in ("categories", "roles"):
            joined = pc.binary_join(pa.array(values.to_numpy(object), pa.list_(pa.string())), ";")
            columns.append((name, "", joined.to_pylist()))
        else:
            unit = "µs" if name.endswith("_us") else "%" if name.endswith("_pct") else ""
            columns.append((name, unit, values.astype(object).where(values.notna(), None).tolist()))
    return {"fields": [[name, unit] for name, unit, _ in columns], "columns": [values for *_, values in columns]}


def _op_classes(classes: pd.DataFrame) -> dict[str, dict[str, list]]:
    """{name (an HCCL call family): {op_type: [calls, µs, bound family, µs over every core type]}}."""
    found: dict[str, dict[str, list]] = {}
    for r in classes.itertuples():  # a loop over at most 2,000 operator classes
        total = r.all_cores_duration_sum_us if pd.notna(r.all_cores_duration_sum_us) else r.duration_sum_us
        found.setdefault(str(r.name), {})[str(r.op_type)] = [
            int(r.call_count),
            round(float(r.duration_sum_us), 3),
            str(r.bound_family),
            round(float(total), 3),
        ]
    return found


def _steps(steps: pd.DataFrame, anatomy: pd.DataFrame, offsets, base_ns: int) -> list:
    if steps.empty:
        return []
    windows = anatomy.pivot_table(index=["rank_id", "step_ordinal"], columns="window", values="wall_ms", aggfunc="sum")
    frame = steps.join(windows, on=["rank_id", "step_ordinal"])
    start = _relative(frame["start_ns"], frame["rank_id"], offsets, base_ns)
    end = _relative(frame["end_ns"], frame["rank_id"], offsets, base_ns)
    part = {
        w: (frame[w] if w in frame else pd.Series(0.0, index=frame.index)).fillna(0.0).round(3)
        for w in ("head", "main", "tail")
    }
    return np.column_stack(
        [
            frame["rank_id"],
            frame["step_ordinal"],
            frame["step_id"].fillna(-1),
            start,
            end,
            part["head"],
            part["main"],
            part["tail"],
            frame["underfeed_ms"].fillna(0.0).round(3),
            frame["wall_ms"].round(3),
            # from where the profiler started the step to its first kernel (0: unknown or none)
            (frame["head_ms"] if "head_ms" in frame else pd.Series(0.0, index=frame.index)).fillna(0.0).round(3),
        ]
    ).tolist()


def _layers(layers: pd.DataFrame, offsets, base_ns: int) -> list:
    if layers.empty:
        return []
    start = _relative(layers["start_ns"], layers["rank_id"], offsets, base_ns)
    end = _relative(layers["end_ns"], layers["rank_id"], offsets, base_ns)
    return [
        [int(r), int(s), int(o), float(a), float(b), str(c), str(role)]
        for r, s, o, a, b, c, role in zip(  # a loop over layers: they are what the inspector lists
            layers["rank_id"],
            layers["step_ordinal"],
            layers["layer_ordinal"],
            start,
            end,
            layers.get("layer_class_id", pd.Series("", index=layers.index)).fillna(""),
            layers.get("layer_role", pd.Series("", index=layers.index)).fillna(""),
        )
    ]


def longest_windows(by_rank: Iterable[pd.DataFrame], cap: int = MAX_BUBBLES) -> pd.DataFrame:
    """Every rank's idle windows reduced to the ones report.html may draw: a rank's longest ``cap``.
    The longest ``cap`` of these are the same windows, in the same order, as of all windows at once."""
    parts = [b.nlargest(cap, "duration_us") if len(b) > cap else b for b in by_rank]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _bubbles(bubbles: pd.DataFrame, offsets, base_ns: int) -> list:
    if bubbles.empty:
        return []
    bubbles = bubbles.nlargest(MAX_BUBBLES, "duration_us") if len(bubbles) > MAX_BUBBLES else bubbles
    start = _relative(bubbles["start_ns"], bubbles["rank_id"], offsets, base_ns)
    end = _relative(bubbles["end_ns"], bubbles["rank_id"], offsets, base_ns)
    labels = bubbles["soft_labels"].fillna("") if "soft_labels" in bubbles else pd.Series("", index=bubbles.index)
    return [
        [int(r), float(a), float(b), str(k), str(e), str(lab)]
        for r, a, b, k, e, lab in zip(bubbles["rank_id"], start, end, bubbles["kind"], bubbles["evidence_id"], labels)
    ]


MOMENTS = ("communication_op", "bubble_window")  # evidence of one time and place: a collective, an idle gap


def _framed(cited: pd.DataFrame) -> str:
    """The evidence a finding's card frames when clicked: its first (strongest) moment — the collective
    it names, a gap it counts; else its first step; else its shortest aggregate (an operator's rows span
    its first to its last call: framing the shortest shows the most)."""
    for kinds in (MOMENTS, ("step_window",)):
        chosen = cited[cited["kind"].isin(kinds)]
        if len(chosen):
            return str(chosen.index[0])
    return str((cited["end_us"] - cited["start_us"]).idxmin())


def _findings(findings: list[dict], evidence: pd.DataFrame, offsets, base_ns: int) -> list[dict]:
    by_id = evidence.set_index("evidence_id") if len(evidence) else pd.DataFrame()
    out = []
    for finding in findings:  # a loop over findings (tens)
        cited = [e for e in finding["evidence_ids"] if e in by_id.index]
        window = None
        if cited:
            cited = [_framed(by_id.loc[cited])] + cited
            row = by_id.loc[cited[0]]
            rank = int(row["rank_id"])
            shift = offsets.get(rank, 0.0)
            window = [
                rank,
                # a rank's clock shifted onto the common one can start its first step before the capture's
                # zero by a few µs: the view starts at 0, so the window does
                max(round((row["start_us"] * 1000 - base_ns - shift) / 1000, 3), 0.0),
                round((row["end_us"] * 1000 - base_ns - shift) / 1000, 3),
                cited[0],
            ]
        out.append(
            {
                "type": finding["finding_type"],
                "severity": finding["severity"],
                "summary": finding["summary"],
                "recoverable_ms": finding.get("recoverable_ms_per_step"),
                "saves_nothing": saves_nothing(finding),  # the step is held by what the fix does not touch
                "caused_ms": finding.get("caused_ms_per_step"),  # a cause the capture cannot recover
                "ranks": finding["rank_ids"],
                "window": window,
                "claim_id": finding["claim_id"],
                # why it is believed: how sure, the number against its threshold, what it cites
                "confidence": finding.get("confidence"),
                "statistic": finding.get("statistic") or {},
                "evidence": finding["evidence_ids"][:4],
                "remedy": (remedy(finding["finding_type"]) or {}).get("text"),  # what to try, from its note
            }
        )
    return out


def html_report(inputs, summary: dict, bubbles: pd.DataFrame, offsets_us: dict, single_file: bool) -> dict[str, bytes]:
    """{relative path under report/: bytes}: report.html and its assets (inlined when ``single_file``)."""
    offsets = {int(r): float(v) * 1000.0 for r, v in (offsets_us or {}).items()}
    events = inputs.events
    starts = [f["start_ns"].min() for f in (events, inputs.steps) if len(f)]
    base_ns = int(min(starts)) if starts else 0
    start = _relative(events["start_ns"], events["rank_id"], offsets, base_ns) if len(events) else np.array([])
    end = _relative(events["end_ns"], events["rank_id"], offsets, base_ns) if len(events) else np.array([])
    ends = [end.max()] if len(end) else []
    if len(inputs.steps):
        ends.append(float(_relative(inputs.steps["end_ns"], inputs.steps["rank_id"], offsets, base_ns).max()))
    span = float(max(ends)) if ends else 1.0
    classes = inputs.operator_classes.head(2000)
    chunks, rows_of = _chunks(events, start, end, span) if len(events) else ({}, {})
    overview = {
        "title": summary["identity"]["profile_root"],
        "status": summary["status"],
        "kpis": summary["kpis"],
        "identity": summary["identity"],
        "headline": summary.get("headline", {}).get("text", []),
        "span_us": span,
        "chunk_us": span / CHUNKS,
        "chunk_ids": sorted(chunks),  # the chunks written: the page asks for no other
        "chunk_reach": {str(i): chunks[i]["reach_us"] for i in sorted(chunks)},
        "ranks": sorted({int(r) for f in (events, inputs.steps) if len(f) for r in f["rank_id"].unique()}),
        "glossary": [list(item) for item in GLOSSARY],
        "ranks_without_events": sorted(
            int(m["rank_id"])
            for m in inputs.manifest("normalize").get("rank_summaries", [])
            if not m.get("event_count")
        ),
        "findings": _findings(inputs.findings, inputs.evidence, offsets, base_ns),
        "together": {k: inputs.together.get(k) for k in ("ms_per_step", "sum_ms_per_step", "share_of_step")},
        "not_judged": [[item["finding_type"], item["reason"]] for item in inputs.not_judged],
        "capture_health": [item["text"] for item in inputs.capture_health],  # idle captures, warm-up steps
        "ledger": ledger_bars(inputs.ledger, inputs.findings),
        "steps": _steps(inputs.steps, inputs.anatomy, offsets, base_ns),
        "layers": _layers(inputs.layers, offsets, base_ns),
        "bubbles": _bubbles(bubbles, offsets, base_ns),
        "pp": pp_chart(inputs.pp_passes, inputs.pp_schedule, offsets, base_ns, events),
        "serving": summary.get("serving"),  # an inference capture's forwards by phase
        "coarse": _coarse(events, start, end, span) if len(events) else {"bin_us": 1, "lanes": [], "busy": []},
        "op_classes": _op_classes(classes),
    }
    assets = {f"{ASSET_DIR}/overview.json.gz": _gz(overview)}
    for index, chunk in chunks.items():
        assets[f"{ASSET_DIR}/kernels_{index}.json.gz"] = _gz(chunk)
        assets[f"{ASSET_DIR}/kernel_fields_{index}.json.gz"] = _gz(kernel_fields(events.iloc[rows_of[index]]))
    template = resources.files("npuprof.pipeline.stages.report").joinpath(TEMPLATE).read_text(encoding="utf-8")
    if single_file:
        inline = {name: base64.b64encode(data).decode("ascii") for name, data in assets.items()}
        shell = template.replace(ASSET_SLOT, "window.NPUPROF_INLINE = " + json.dumps(inline) + ";")
        return {"report.html": shell.encode("utf-8")}
    return {
        "report.html": template.encode("utf-8"),
        **{script_of(name): _script(name, data) for name, data in assets.items()},
    }


def script_of(asset: str) -> str:
    """The script file an asset is written as: ``assets/overview.json.gz`` -> ``assets/overview.js``."""
    return asset.removesuffix(".json.gz") + ".js"


def _script(asset: str, data: bytes) -> bytes:
    """An asset as a script that registers its gzipped bytes (base64): a page opened from file:// may
    load scripts beside it but not fetch files, so a double-click shows every level."""
    call = f"npuprofAsset({json.dumps(asset)}, {json.dumps(base64.b64encode(data).decode('ascii'))});\n"
    return call.encode("ascii")
