"""Human units for what a person reads (the command line, the study's progress lines); the JSON
and CSV files keep SI numbers."""
from __future__ import annotations

import math

import pytest

from dpsolve._units import human_time


@pytest.mark.parametrize("seconds, text", [
    (2.38, "2.38 s"), (2380.0 / 1e3, "2.38 s"), (23.8e-3, "23.8 ms"), (0.238, "238 ms"),
    (2.38e-4, "238 us"), (2.38e-6, "2.38 us"), (5e-9, "5.00 ns"), (0.0, "0 s"),
    (1.0, "1.00 s"), (0.9996, "1.00 s"), (0.99949, "999 ms"), (9.996e-4, "1.00 ms"),
    (12.345, "12.3 s"), (59.94, "59.9 s"), (59.96, "1 min 00 s"), (75.0, "1 min 15 s"),
    (3599.4, "59 min 59 s"), (3725.0, "1 h 02 min"), (90000.0, "25 h 00 min"),
    (None, "n/a"), (math.nan, "n/a"), (-0.5, "-500 ms"), (math.inf, "inf"),
])
def test_human_time(seconds, text):
    assert human_time(seconds) == text


def test_human_time_never_prints_an_exponent():
    for k in range(-12, 7):
        for m in (1.0, 2.5, 9.99, 9.9999):
            assert "e" not in human_time(m * 10.0 ** k).replace("sec", "")
