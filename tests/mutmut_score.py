"""Kill rate per module from ``mutmut results --all true`` (stdin), for ``make mutate``.

Killed: a test failed (or timed out, or crashed) on the mutant. Not killed:
survived, "no tests" (no selected test even runs the mutated function) and "not
checked". Exit 1 when a module is under --target percent, 2 when nothing was tested.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter, defaultdict

KILLED = {"killed", "timeout", "segfault"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--target", type=float, default=90.0, help="percent killed per module")
    args = ap.parse_args()
    per: dict[str, Counter[str]] = defaultdict(Counter)
    for line in sys.stdin:
        m = re.match(r"\s*([\w.]+?)\.x\S*__mutmut_\d+: (.+?)\s*$", line)
        if m:
            per[m.group(1)][m.group(2)] += 1
    if not per:
        print("mutmut_score: no mutants in the input (did mutmut run?)", file=sys.stderr)
        return 2
    if all(set(c) == {"not checked"} for c in per.values()):
        print(
            "mutmut_score: no mutant was tested: mutmut stopped before (most often the tests"
            " failed on the unmutated code; see mutmut-run.log)",
            file=sys.stderr,
        )
        return 2
    low = False
    for module, c in sorted(per.items()):
        total = sum(c.values())
        killed = sum(n for s, n in c.items() if s in KILLED)
        rate = 100.0 * killed / total
        low |= rate < args.target
        rest = ", ".join(f"{n} {s}" for s, n in sorted(c.items()) if s not in KILLED)
        print(f"{module:24} {killed:4}/{total:<4} killed = {rate:5.1f} %  ({rest or 'none left'})")
    return 1 if low else 0


if __name__ == "__main__":
    sys.exit(main())
