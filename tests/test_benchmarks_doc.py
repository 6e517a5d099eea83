"""BENCHMARKS.md stays readable: long raw tables live in benchmarks/*.csv, and every CSV the
document names is there and well formed."""
from __future__ import annotations

import csv
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "BENCHMARKS.md"
MAX_TABLE_LINES = 40          # longer tables belong in benchmarks/*.csv

CSV_NAME = re.compile(r"benchmarks/[\w.-]+\.csv")


def named_csvs(text):
    """The benchmarks/*.csv paths the document names, in order, each once."""
    return list(dict.fromkeys(CSV_NAME.findall(text)))


def long_tables(text, limit=MAX_TABLE_LINES):
    """(first line number, length) of each run of more than `limit` lines starting with '|'."""
    found, start, run = [], 0, 0
    for number, line in enumerate(text.splitlines() + [""], start=1):
        if line.startswith("|"):
            if run == 0:
                start = number
            run += 1
        else:
            if run > limit:
                found.append((start, run))
            run = 0
    return found


def csv_problems(path):
    """What is wrong with one CSV file; an empty list when it is fine."""
    if not path.is_file():
        return [f"{path.relative_to(ROOT)} does not exist"]
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        header = reader.fieldnames or []
    problems = []
    if not header:
        problems.append("no header")
    if len(set(header)) != len(header):
        problems.append("repeated column names")
    if not rows:
        problems.append("no rows")
    for number, row in enumerate(rows, start=2):
        # DictReader files extra cells under None and fills missing ones with None
        if None in row or None in row.values():
            problems.append(f"line {number}: {len(header)} columns expected")
    return [f"{path.relative_to(ROOT)}: {p}" for p in problems]


def test_named_csvs_exist_and_parse():
    names = named_csvs(DOC.read_text())
    assert names, "BENCHMARKS.md names no benchmarks/*.csv"
    problems = [p for name in names for p in csv_problems(ROOT / name)]
    assert not problems, "\n".join(problems)


def test_no_long_tables():
    found = long_tables(DOC.read_text())
    assert not found, (f"tables of more than {MAX_TABLE_LINES} lines in BENCHMARKS.md "
                       f"(line, length): {found}; move them to benchmarks/*.csv")
