"""The compute-sanitizer case set (kernels/cuda/sanitize_cases.py) through a lab variant build.

``compute-sanitizer --tool memcheck --error-exitcode 1 python -m attention_conformance.kernels.cuda.lab.sanitize
(--fa3-variant NAME | --fp8-variant NAME | --fa3-bwd-variant NAME [--deterministic] | --fa2-bwd-variant NAME)``

The cases of the launcher the variant belongs to run through `kernels.cuda.lab`'s build of that name (the FP8
variants: the cases of their V layout); a case the variant has no build for (ATTN_ERR_UNSUPPORTED: most ablation
builds exist for head dim 128 without softcap) is skipped with the launcher's reason. Exit code 0 = clean, 2 for a
usage error (an unknown variant) or no device.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from attention_conformance.kernels import cuda_lib
from attention_conformance.kernels.cuda import lab
from attention_conformance.kernels.cuda.sanitize_cases import CASES, Runner, run_cases

__all__ = ["cases_for", "main", "runner_for"]

#: option -> (the lab's variant table, the shipped launcher whose cases it runs)
OPTIONS = {
    "fa3_variant": (lab.FA3_FWD_VARIANTS, ("attn_fa3_fwd",)),
    "fp8_variant": (lab.FP8_VARIANTS, ("attn_fa3_fp8_fwd",)),
    "fa3_bwd_variant": (lab.FA3_BWD_VARIANTS, ("attn_fa3_bwd", "attn_fa3_bwd_deterministic")),
    "fa2_bwd_variant": (lab.FA2_BWD_VARIANTS, ("attn_fa2_bwd",)),
}


def cases_for(option: str, variant: str) -> list[tuple[str, dict]]:
    """The cases a variant of ``option`` runs: its launcher's, for an FP8 variant those of its V layout."""
    launchers = OPTIONS[option][1]
    out = [(name, spec) for name, spec in CASES if name in launchers]
    if option == "fp8_variant" and variant != "default":
        kmajor = variant in lab.FP8_KMAJOR_VARIANTS
        out = [(name, spec) for name, spec in out if bool(spec.get("vt")) == kmajor]
    return out


def runner_for(option: str, variant: str, deterministic: bool = False) -> Runner:
    """A `sanitize_cases.Runner` that runs the lab build ``variant`` where the case's launcher is the option's."""
    launchers = OPTIONS[option][1]

    def run(name: str, params: Any) -> None:
        if name not in launchers:
            cuda_lib.call(name, params)
        elif option == "fa3_variant":
            lab.call_fa3_fwd(params, variant)
        elif option == "fp8_variant":
            lab.call_fp8_fwd(params, variant)
        elif option == "fa3_bwd_variant":
            lab.call_fa3_bwd(params, variant, deterministic=deterministic or name.endswith("_deterministic"))
        else:
            lab.call_fa2_bwd(params, variant)

    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attention_conformance.kernels.cuda.lab.sanitize",
                                 description=__doc__.split("\n")[0])
    group = ap.add_mutually_exclusive_group(required=True)
    for option, (table, _) in OPTIONS.items():
        group.add_argument("--" + option.replace("_", "-"), dest=option, choices=sorted(table),
                           help=f"one of {', '.join(table)}")
    ap.add_argument("--deterministic", action="store_true", help="with --fa3-bwd-variant: every case deterministic")
    args = ap.parse_args(argv)
    option = next(o for o in OPTIONS if getattr(args, o) is not None)
    variant = getattr(args, option)
    lab.library()  # a missing or stale lab build is reported before any case runs
    failures = run_cases(cases_for(option, variant), runner_for(option, variant, args.deterministic),
                         declines_skip=variant != "default")
    return 2 if failures < 0 else 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
