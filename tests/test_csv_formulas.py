"""CSV views neutralise spreadsheet formulas that come from profiling data (CSV injection); Parquet keeps
the raw value."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
from conftest import run_cli

from npuprof.pipeline import csv_formulas, io
from npuprof.synth import generate

FORMULAS = ['=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0", "@SUM(1+1)*cmd|' /C calc'!A0"]


def _cells(out: Path) -> list[tuple[str, str]]:
    found = []
    for path in out.rglob("*.csv"):
        with open(path, newline="", encoding="utf-8") as handle:
            found += [(path.name, cell) for row in csv.reader(handle) for cell in row]
    return found


def test_formula_cells_from_kernel_names_are_led_by_an_apostrophe_in_every_csv_view(tmp_path):
    root = tmp_path / "root"
    generate(root, "clean", ranks=2, steps=4, layers=4, seed=0, trace=False)
    for kernels in root.rglob("kernel_details.csv"):
        frame = pd.read_csv(kernels, dtype=str, keep_default_na=False)
        for index, formula in enumerate(FORMULAS):  # names and op types of whole kernel kinds
            frame.loc[frame["Type"] == frame["Type"].unique()[index], ["Name", "Type"]] = formula
        frame.to_csv(kernels, index=False)
    out = tmp_path / "out"
    run = run_cli("analyze", str(root), "-o", str(out), "--mode", "full", "--progress", "none")
    assert run.returncode == 0, run.stderr
    cells = _cells(out)
    assert any(cell.startswith("'=HYPERLINK") for _, cell in cells), "the planted names reach a CSV view"
    risky = [(name, cell) for name, cell in cells if cell and cell[0] in "=+@\t\r"]
    assert not risky, risky[:5]
    events = pd.read_parquet(next(out.glob("normalized_events/*/*.parquet")), columns=["name"])
    assert FORMULAS[0] in set(events["name"])  # the data itself is not changed


def test_formula_safe_leaves_numbers_and_plain_text_alone():
    """Every lead a spreadsheet reads as a formula (OWASP: = + - @, tab and carriage return) gets an
    apostrophe, each on its own; nothing else changes."""
    leads = ["=1+1", "+1", "-x", "@SUM(1)", "\tcmd", "\r=1+1"]
    frame = pd.DataFrame({"name": [*leads, "MatMul", None], "value": [-1.5, 2.0, -3.0, 4.0, 5.0, 6.0, 7.0, 8.0]})
    safe = csv_formulas.formula_safe(frame)
    assert safe["name"].tolist()[:7] == [*("'" + lead for lead in leads), "MatMul"] and pd.isna(safe["name"][7])
    assert safe["value"].tolist() == [-1.5, 2.0, -3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    assert frame["name"][0] == "=1+1"  # the input is not changed
    numbers = frame[["value"]]
    assert csv_formulas.formula_safe(numbers).equals(numbers)  # negative numbers are not text: left alone


def test_a_csv_view_leads_formulas_in_every_text_column_kind_and_reads_back_raw(tmp_path):
    names = ["=1+1", "MatMul", "'+x", None, "\rcmd"]
    frame = pd.DataFrame(
        {
            "name": pd.Series(names, dtype="str"),
            "kind": pd.Series(["@a", "b", "@a", "b", "c"], dtype="category"),
            "note": pd.Series(["-x", "y", "z", "w", "v"], dtype=object),
            "value": [-1.5, 2.0, -3.0, 4.0, 5.0],
        }
    )
    path = io.write_csv(tmp_path / "view.csv", frame)
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert [row[0] for row in rows[1:]] == ["'=1+1", "MatMul", "''+x", "", "'\rcmd"]
    assert [row[1] for row in rows[1:]] == ["'@a", "b", "'@a", "b", "c"] and rows[1][2] == "'-x"
    assert rows[1][3] == "-1.5"  # numbers are not formulas
    back = csv_formulas.read_csv_view(path)
    assert back["name"].tolist()[:3] == names[:3] and back["kind"].tolist()[0] == "@a"


def test_a_csv_view_leads_formulas_in_a_text_column_after_a_number_column(tmp_path):
    path = io.write_csv(tmp_path / "view.csv", pd.DataFrame({"value": [1.5, 2.5], "name": ["=1+1", "ok"]}))
    with open(path, newline="", encoding="utf-8") as handle:
        assert list(csv.reader(handle))[1:] == [["1.5", "'=1+1"], ["2.5", "ok"]]


def test_formula_safe_leads_formulas_in_a_column_of_texts_and_numbers():
    safe = csv_formulas.formula_safe(pd.DataFrame({"mixed": [5, "@x", "ok"]}))
    assert safe["mixed"].tolist() == [5, "'@x", "ok"]


def test_reading_a_csv_view_back_takes_read_csv_options(tmp_path):
    path = io.write_csv(tmp_path / "view.csv", pd.DataFrame({"name": ["=1+1", "x"], "value": [1, 2]}))
    back = csv_formulas.read_csv_view(path, usecols=["name"])
    assert list(back.columns) == ["name"] and back["name"].tolist() == ["=1+1", "x"]
