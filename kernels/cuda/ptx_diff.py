"""Compare the PTX of the sm_80-family kernels between a git revision and the working tree.

``python -m attention_conformance.kernels.cuda.ptx_diff [--base REV] [--head REV] [--arch 80,90a] [--keep DIR]
[--rename OLD=NEW ...]``

A CPU-only check that a refactor of kernels/cuda/ changes no instruction: every ``.cu`` (fa3_fwd.cu
excluded unless ``--with-fa3``) is compiled to PTX (``-ptx``, virtual architecture only, kernels.build's
flags without ``-lineinfo`` so no line numbers appear) from ``git archive REV kernels/cuda`` and from
the working tree (or ``--head REV``: another revision, e.g. a merge result), and the two are compared
line by line after normalising mangled names: every ``_Z...`` symbol (a ``_param_N`` suffix kept apart)
is demangled with c++filt and each ``--rename`` pair is applied to the demangled text, so a namespace
move shows up as nothing else. Exit 0 when every pair is identical after normalisation, 1 otherwise
(the first differing lines are printed).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from attention_conformance.kernels.build import CUDA_DIR, REPO_ROOT, find_nvcc

__all__ = ["DEFAULT_RENAMES", "compile_ptx", "main", "normalise"]

#: namespace moves of the "One CUDA house" merge (NOTES.md): old demangled prefix -> new
DEFAULT_RENAMES = ("attn_bwd::=attn::bwd::", "attn_fa1::=attn::fa1::")
_SYM = re.compile(r"_Z[A-Za-z0-9_$]+")
_PARAM = re.compile(r"^(.*?)(_param_\d+)$")


def compile_ptx(nvcc: str, cuda_dir: Path, src: str, arch: str, out: Path) -> Path:
    """nvcc -O3 -std=c++17 -I cuda_dir/include, PTX for compute_<arch> only, into out."""
    cmd = [nvcc, "-O3", "-std=c++17", "-I", str(cuda_dir / "include"), "-gencode",
           f"arch=compute_{arch},code=compute_{arch}", "-ptx", "-o", str(out), str(cuda_dir / src)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"nvcc failed on {src} (compute_{arch}):\n{' '.join(cmd)}\n{proc.stderr}")
    return out


def _demangle(symbols: list[str]) -> dict[str, str]:
    if not symbols:
        return {}
    proc = subprocess.run(["c++filt"], input="\n".join(symbols) + "\n", capture_output=True, text=True,
                          check=True)
    return dict(zip(symbols, proc.stdout.splitlines()))


def normalise(text: str, renames: list[tuple[str, str]]) -> list[str]:
    """PTX lines with every mangled symbol demangled and the renames applied (see the module doc)."""
    tokens = sorted(set(_SYM.findall(text)))
    bases = {}
    for t in tokens:
        m = _PARAM.match(t)
        bases[t] = (m.group(1), m.group(2)) if m else (t, "")
    dem = _demangle(sorted({b for b, _ in bases.values()}))

    def rewrite(m: re.Match) -> str:
        base, suffix = bases[m.group(0)]
        name = dem.get(base, base)
        for old, new in renames:
            name = name.replace(old, new)
        return "<" + name + ">" + suffix

    return _SYM.sub(rewrite, text).splitlines()


def _tree(rev: str, dest: Path) -> Path:
    """kernels/cuda of git revision rev, extracted under dest."""
    archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", rev, "kernels/cuda"], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest / "kernels" / "cuda"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attention_conformance.kernels.cuda.ptx_diff",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="main", help="git revision to compare against (default main)")
    ap.add_argument("--head", default=None, help="git revision to compare (default: the working tree)")
    ap.add_argument("--arch", default="80,90a", help="comma-separated virtual architectures (default 80,90a)")
    ap.add_argument("--rename", action="append", default=None, metavar="OLD=NEW",
                    help=f"demangled-name rewrite applied to the base PTX (default: {' '.join(DEFAULT_RENAMES)})")
    ap.add_argument("--with-fa3", action="store_true", help="also compare fa3_fwd.cu (90a only)")
    ap.add_argument("--keep", default=None, help="directory to keep the PTX files in (default: a temporary one)")
    ap.add_argument("--jobs", type=int, default=2, help="parallel nvcc processes (default 2)")
    args = ap.parse_args(argv)
    nvcc = find_nvcc()
    if nvcc is None:
        print("ptx_diff: nvcc not found (set NVCC or CUDA_HOME, or put nvcc on PATH)", file=sys.stderr)
        return 2
    pairs = [tuple(r.split("=", 1)) for r in (args.rename or DEFAULT_RENAMES)]
    if any(len(p) != 2 for p in pairs):
        print(f"ptx_diff: --rename {args.rename}: expected OLD=NEW", file=sys.stderr)
        return 2
    archs = [a.strip() for a in args.arch.split(",") if a.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        (work / "base").mkdir(parents=True, exist_ok=True)
        (work / "head").mkdir(parents=True, exist_ok=True)
        base_dir = _tree(args.base, work / "base")
        head_dir = _tree(args.head, work / "head") if args.head else CUDA_DIR
        srcs = sorted(p.name for p in head_dir.glob("*.cu") if args.with_fa3 or p.name != "fa3_fwd.cu")
        jobs = [(s, a) for s in srcs for a in archs if s != "fa3_fwd.cu" or a == "90a"]
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futs = {(s, a, side): pool.submit(compile_ptx, nvcc, d, s, a, work / side / f"{s[:-3]}.sm{a}.ptx")
                    for s, a in jobs for side, d in (("base", base_dir), ("head", head_dir))
                    if side == "head" or (d / s).is_file()}
            outs = {k: f.result() for k, f in futs.items()}
        failed = 0
        for s, a in jobs:
            if (s, a, "base") not in outs:
                print(f"{s:12s} compute_{a:4s} NEW (not in {args.base})")
                continue
            raw_b = outs[(s, a, "base")].read_text()
            raw_h = outs[(s, a, "head")].read_text()
            entries = raw_h.count(".entry ")
            if raw_b == raw_h:
                print(f"{s:12s} compute_{a:4s} identical bytes ({entries} kernels)")
                continue
            nb, nh = normalise(raw_b, pairs), normalise(raw_h, [])
            if nb == nh:
                print(f"{s:12s} compute_{a:4s} identical after name normalisation ({entries} kernels, "
                      f"{len(nh)} lines)")
                continue
            failed += 1
            bad = [i for i, (x, y) in enumerate(zip(nb, nh)) if x != y]
            first = bad[0] if bad else min(len(nb), len(nh))
            print(f"{s:12s} compute_{a:4s} DIFFERENT: {len(nb)} vs {len(nh)} lines, {len(bad)} differ; "
                  f"first at line {first + 1}:\n  base: {nb[first] if first < len(nb) else '<eof>'}\n"
                  f"  head: {nh[first] if first < len(nh) else '<eof>'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
