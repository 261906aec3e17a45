"""Re-run one property-test counterexample: ``python -m attention_conformance.property_tests.rerun --impl NAME --case
JSON``.

The JSON is `Case.to_dict()` (what a failing kernel property prints). Prints the verdict of
`property_tests.kernel_check.evaluate` and exits 1 when the case fails, 0 when it passes.
"""

from __future__ import annotations

import argparse
import json
import sys

from attention_conformance.cases.case import Case
from attention_conformance.property_tests.kernel_check import evaluate

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attention_conformance.property_tests.rerun", description=__doc__)
    ap.add_argument("--impl", required=True, help="adapter name or module:attr")
    ap.add_argument("--case", required=True, help="the case as JSON (Case.to_dict())")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    from attention_conformance.adapters.registry import load

    loaded = load(args.impl, args.device)
    if not loaded.available:
        print(f"{args.impl}: unavailable: {loaded.reason}", file=sys.stderr)
        return 2
    case = Case.from_dict(json.loads(args.case))
    v = evaluate(loaded.adapter, case, args.device)
    print(f"{case.id}: {v.outcome} {v.check} usage={v.usage:.3g}")
    if v.message:
        print(v.message)
    return 1 if v.failed else 0


if __name__ == "__main__":
    sys.exit(main())
