"""Human units for what a person reads: ``human_time(2.38) == "2.38 s"`` instead of
``2.38e+03 ms``. The JSON and CSV outputs keep SI numbers (seconds, joules); only text meant to be
read goes through here."""
from __future__ import annotations

import math

_UNITS = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))


def human_time(seconds) -> str:
    """Seconds as a person reads them, 3 significant digits and no exponent: "2.38 s",
    "23.8 ms", "238 us", "5.00 ns"; from a minute on "1 min 15 s", from an hour on "1 h 02 min";
    "n/a" for None or NaN."""
    if seconds is None:
        return "n/a"
    seconds = float(seconds)
    if math.isnan(seconds):
        return "n/a"
    if seconds < 0:
        return "-" + human_time(-seconds)
    if math.isinf(seconds):
        return "inf"
    if seconds == 0:
        return "0 s"
    if seconds >= 59.95:                          # would print as 60.0 s or more
        total = round(seconds)
        if total < 3600:
            m, s = divmod(total, 60)
            return f"{m} min {s:02d} s"
        h, rest = divmod(round(seconds / 60), 60)
        return f"{h} h {rest:02d} min"
    # the largest unit in which the value rounds to 1.00 or more
    unit, v = next(((u, seconds / sc) for u, sc in _UNITS if seconds / sc >= 0.9995),
                   ("ns", seconds / 1e-9))
    if v < 0.9995:                                # below a nanosecond
        return f"{v:.3g} ns"
    decimals = 0 if v >= 99.95 else 1 if v >= 9.995 else 2
    return f"{v:.{decimals}f} {unit}"
