"""variant="auto" and format="auto": the fastest (variant, format) measured on a system like this
one.

The rule is data, not code: ``auto_rule.json`` (next to this file) holds, for sample problems of
several sizes and row lengths and for each method, the time per iteration of every device-side
variant in every format, measured by ``scripts/bench-auto --write`` (on another GPU, that one
command re-derives it). For a system, the nearest sample point -- distance
|log(n / n_p)| + |log(mean row / mean row_p)| among the points of the same method (CG's when the
method has none) -- gives a ranking of (variant, format) pairs, fastest first; ``auto`` takes the
first pair that

* is available here and takes the system (dtype, operators, method: ``Backend.why_not``),
* is host-driven when a callback is given (device-driven variants cannot call Python), and
* uses a format the matrix suits: ELL only when its padding is at most ``ELL_MAX_FILL`` times the
  nonzeros (the sample problems are regular, so their ELL timings say nothing about padded rows).

If no pair qualifies (no GPU, a LinearOperator, no rule file), the fixed preference order
``AUTO_PREFERENCE`` and the row-statistics format rule (``formats.choose_format``) decide.
``report.variant`` and ``report.format`` say what was picked.
"""
from __future__ import annotations

import functools
import json
import math
from pathlib import Path

RULE_FILE = Path(__file__).with_name("auto_rule.json")
ELL_MAX_FILL = 1.25


@functools.lru_cache(maxsize=4)
def load_rule(path: str = str(RULE_FILE)) -> dict | None:
    """The measured rule, or None when the file is absent or unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def nearest_point(rule: dict, method: str, n: int, mean_row: float) -> dict | None:
    points = [p for p in rule.get("points", []) if p["method"] == method and p["us_per_iter"]]
    if not points:
        points = [p for p in rule.get("points", []) if p["method"] == "cg" and p["us_per_iter"]]
    if not points:
        return None

    def dist(p):
        return (abs(math.log(max(n, 1) / max(p["n"], 1)))
                + abs(math.log(max(mean_row, 1e-9) / max(p["mean_row"], 1e-9))))
    return min(points, key=dist)


_RANKINGS: dict = {}


def ranking(rule: dict, method: str, stats: dict) -> list[tuple[str, str]]:
    """(variant, format) pairs of the nearest sample point, fastest first, formats the matrix
    suits only (memoised per rule and system shape: the search costs tens of microseconds)."""
    key = (id(rule), method, stats["n"], stats["mean"], stats["ell_fill"] > ELL_MAX_FILL)
    hit = _RANKINGS.get(key)
    if hit is not None and hit[0] is rule:
        return hit[1]
    out = _ranking(rule, method, stats)
    if len(_RANKINGS) > 4096:
        _RANKINGS.clear()
    _RANKINGS[key] = (rule, out)
    return out


def _ranking(rule: dict, method: str, stats: dict) -> list[tuple[str, str]]:
    p = nearest_point(rule, method, stats["n"], stats["mean"])
    if p is None:
        return []
    pairs = sorted(p["us_per_iter"].items(), key=lambda kv: kv[1])
    out = []
    for key, _ in pairs:
        variant, fmt = key.split("/", 1)
        if fmt == "ell" and stats["ell_fill"] > ELL_MAX_FILL:
            continue
        out.append((variant, fmt))
    return out


def choose(system, variant: str, fmt: str, callback, rule: dict | None = None):
    """(backend, format) for ``variant`` / ``fmt`` as the caller asked ("auto" or a name).

    Returns None when the rule has nothing to say (no rule, no matrix, no pair qualifies); the
    front end then falls back to its fixed order."""
    from . import methods
    from .backends import get_backend
    from .formats import row_stats
    rule = load_rule() if rule is None else rule
    if rule is None or system.csr is None:
        return None
    stats = row_stats(system.csr, adjoint=methods.get(system.method).adjoint)
    for v, f in ranking(rule, system.method, stats):
        if (variant != "auto" and v != variant) or (fmt != "auto" and f != fmt):
            continue
        backend = get_backend(v)
        if backend is None or (callback is not None and backend.device_driven):
            continue
        if not backend.availability()[0] or not backend.supports(system):
            continue
        return backend, f
    return None
