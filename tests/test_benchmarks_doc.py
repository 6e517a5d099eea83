"""The written record stays readable. BENCHMARKS.md: a one-page summary of current figures first,
the whole file under MAX_LINES lines, long raw tables in benchmarks/*.csv, every CSV it names there
and well formed, every file it links there, every #anchor it links a heading. README.md: its
status table's rows are short (the detail lives in prose below the table or in BENCHMARKS.md), and
its links into BENCHMARKS.md and its own sections resolve."""
from __future__ import annotations

import csv
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "BENCHMARKS.md"
README = ROOT / "README.md"
MAX_TABLE_LINES = 40          # longer tables belong in benchmarks/*.csv
MAX_LINES = 600               # the project's rule: the whole file under 600 lines
MAX_SUMMARY_LINES = 60        # the summary at the top fits a page
MAX_STATUS_ROW = 300          # characters in one row of README's status table

CSV_NAME = re.compile(r"benchmarks/[\w.-]+\.csv")
LINK = re.compile(r"\]\(([^)\s]+)\)")     # [text](target)


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


def slug(heading):
    """GitHub's anchor for a heading's text: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(text):
    """The #anchors of a Markdown file's headings (outside code blocks), repeats numbered as GitHub
    numbers them."""
    found, seen, in_code = set(), {}, False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and re.match(r"#{1,6} ", line):
            base = slug(line.lstrip("#"))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(text):
    """(path, anchor) of every relative Markdown link; path '' for a link inside the file."""
    out = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):          # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        out.append((path, anchor))
    return out


def sections(text, level="## "):
    """(heading, number of lines) of each section at the given level, in order."""
    found = []
    for line in text.splitlines():
        if line.startswith(level):
            found.append([line[len(level):], 0])
        elif found:
            found[-1][1] += 1
    return [tuple(f) for f in found]


def test_whole_file_under_the_line_limit():
    lines = len(DOC.read_text().splitlines())
    assert lines < MAX_LINES, (f"BENCHMARKS.md has {lines} lines; the rule is under {MAX_LINES}: "
                               "condense the log, move raw tables to benchmarks/*.csv")


def test_summary_comes_first_and_fits_a_page():
    found = sections(DOC.read_text())
    assert found and found[0][0].lower().startswith("summary"), (
        f"the first section of BENCHMARKS.md should be the summary, not {found[:1]}")
    assert found[0][1] <= MAX_SUMMARY_LINES, (
        f"the summary is {found[0][1]} lines; keep it to a page ({MAX_SUMMARY_LINES})")


def test_linked_files_exist():
    text = DOC.read_text()
    missing = sorted({path for path, _ in links(text) if path and not (ROOT / path).exists()})
    assert not missing, f"BENCHMARKS.md links files that are not there: {missing}"
    linked_csvs = [path for path, _ in links(text) if path.endswith(".csv")]
    assert linked_csvs, "BENCHMARKS.md links no CSV"
    problems = [p for name in linked_csvs for p in csv_problems(ROOT / name)]
    assert not problems, "\n".join(problems)


def test_anchors_resolve():
    docs = {"BENCHMARKS.md": DOC.read_text(), "README.md": README.read_text()}
    heads = {name: anchors(text) for name, text in docs.items()}
    broken = []
    for name, text in docs.items():
        for path, anchor in links(text):
            target = name if path == "" else path
            if anchor and target in heads and anchor not in heads[target]:
                broken.append(f"{name} -> {target}#{anchor}")
            if path and path not in heads and not (ROOT / path).exists():
                broken.append(f"{name} -> {path} (no such file)")
    assert not broken, "links to no heading or file:\n" + "\n".join(broken)


def status_rows(text):
    """The rows (header and separator excluded) of README's first table after '## Status'."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("## Status"))
    rows, in_table = [], False
    for line in lines[start + 1:]:
        if line.startswith("|"):
            in_table = True
            rows.append(line)
        elif in_table or line.startswith("## "):
            break
    return rows[2:]


def test_readme_status_rows_are_short():
    rows = status_rows(README.read_text())
    assert len(rows) >= 10, "README's status table not found"
    long = [f"{len(row)} chars: {row[:60]}..." for row in rows if len(row) > MAX_STATUS_ROW]
    assert not long, (f"README status rows over {MAX_STATUS_ROW} characters (move the detail to "
                      "the prose below the table or to BENCHMARKS.md):\n" + "\n".join(long))
