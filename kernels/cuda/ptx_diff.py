"""Compare the PTX of the kernels between a git revision and the working tree.

``python -m attention_conformance.kernels.cuda.ptx_diff [--base REV] [--head REV] [--arch 80,90a] [--keep DIR]
[--base-ptx DIR] [--rename OLD=NEW ...] [--with-fa3] [--kernels] [--lab]``

A CPU-only check that a refactor of kernels/cuda/ changes no instruction. Every ``.cu`` (fa3_fwd.cu excluded unless
``--with-fa3``) is compiled to PTX (``-ptx``, virtual architecture only, kernels.build's flags without ``-lineinfo`` so
no line numbers appear) from ``git archive REV kernels/cuda`` (or taken from ``--base-ptx DIR``, the ``base`` folder
an earlier ``--keep`` left: ``<source>.sm<arch>.ptx``) and from the working tree (or ``--head REV``: another revision,
e.g. a merge result).

Two comparisons:

- by file (the default): the two PTX files line by line after normalising mangled names: every ``_Z...`` symbol (a
  ``_param_N`` suffix kept apart) is demangled with c++filt and each ``--rename`` pair is applied to the demangled text,
  so a namespace move shows up as nothing else;
- by kernel (``--kernels``): each ``.entry`` of a head file is looked up among the entries of every base file of the
  same architecture by its body, with its own name and linkage, its labels (the branch targets ``$L__BB<i>_<n>``,
  whose ``<i>`` is the function's place in the file, and the inline assembly's ``%=`` labels, numbered across the
  file) and the other symbols normalised. A kernel whose configuration type was renamed, or that moved to another
  source, then still matches the base kernel it was; a kernel with no base entry of the same body is DIFFERENT.
  ``--lab`` also compiles the lab build's sources (kernels/cuda/lab/*.cu), so base kernels that moved there are
  found; lab kernels are reported, never counted as failures. The report ends with the base kernels that no head
  kernel matches (the builds the change removed).

Exit 0 when every pair of files (by file) or every head kernel of a shipped source (by kernel) is identical after
normalisation, 1 otherwise (the first differing lines are printed).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from attention_conformance.kernels.build import CUDA_DIR, REPO_ROOT, find_nvcc

__all__ = ["DEFAULT_RENAMES", "compile_ptx", "entries", "entry_key", "main", "match_kernels", "normalise"]

#: namespace moves of the "One CUDA house" merge (docs/README.md): old demangled prefix -> new
DEFAULT_RENAMES = ("attn_bwd::=attn::bwd::", "attn_fa1::=attn::fa1::")
LAB_DIR = "lab"
_SYM = re.compile(r"_Z[A-Za-z0-9_$]+")
_PARAM = re.compile(r"^(.*?)(_param_\d+)$")
_ENTRY = re.compile(r"^(?:\.visible |\.weak )?\.entry (\S+?)\(")
# internal-linkage names carry a hash of the translation unit: _INTERNAL_<hash>_<n>_<file>_cu_<hash>, and mangled
# anonymous namespaces _GLOBAL__N__<hash>_<n>_<file>_cu_<hash>
_INTERNAL = re.compile(r"(_INTERNAL|_GLOBAL__N_)_[0-9a-f]+_(\d+_\w+?_cu)_[0-9a-f]{8}")
# a kernel's linkage (.visible, or none for a kernel of an anonymous namespace) is not its code
_LINKAGE = re.compile(r"^(?:\.visible |\.weak )?\.entry ")
_LABEL = re.compile(r"^\s*([A-Za-z_$][\w$]*):", re.M)


def compile_ptx(nvcc: str, cuda_dir: Path, src: str, arch: str, out: Path) -> Path:
    """nvcc -O3 -std=c++17 -I cuda_dir/include, PTX for compute_<arch> only, into out (``src`` relative to cuda_dir)."""
    cmd = [nvcc, "-O3", "-std=c++17", "-I", str(cuda_dir / "include"), "-gencode",
           f"arch=compute_{arch},code=compute_{arch}", "-ptx", "-o", str(out), str(cuda_dir / src)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"nvcc failed on {src} (compute_{arch}):\n{' '.join(cmd)}\n{proc.stderr}")
    return out


def _demangle(symbols: Iterable[str]) -> dict[str, str]:
    symbols = sorted(set(symbols))
    if not symbols:
        return {}
    proc = subprocess.run(["c++filt"], input="\n".join(symbols) + "\n", capture_output=True, text=True,
                          check=True)
    return dict(zip(symbols, proc.stdout.splitlines()))


def normalise(text: str, renames: list[tuple[str, str]]) -> list[str]:
    """PTX lines with every mangled symbol demangled, the renames applied (see the module doc) and the hash of a
    translation unit in its internal-linkage names left out (it changes with the file's text)."""
    tokens = sorted(set(_SYM.findall(text)))
    bases = {}
    for t in tokens:
        m = _PARAM.match(t)
        bases[t] = (m.group(1), m.group(2)) if m else (t, "")
    dem = _demangle(b for b, _ in bases.values())

    def rewrite(m: re.Match) -> str:
        base, suffix = bases[m.group(0)]
        name = dem.get(base, base)
        for old, new in renames:
            name = name.replace(old, new)
        return "<" + name + ">" + suffix

    return _INTERNAL.sub(r"\1_\2", _SYM.sub(rewrite, text)).splitlines()


def entries(text: str) -> dict[str, list[str]]:
    """The kernels of a PTX file: mangled name -> its lines, from the ``.entry`` line to the next entry's ``.globl``
    comment (or the end of the file)."""
    out: dict[str, list[str]] = {}
    name = None
    for line in text.splitlines():
        m = _ENTRY.match(line)
        if m:
            name = m.group(1)
            out[name] = []
        elif line.lstrip().startswith("// .globl"):
            name = None
        if name is not None:
            out[name].append(line)
    return out


def _relabel(body: str) -> str:
    """The labels a kernel defines (its branch targets ``$L__BB<function>_<n>`` and the inline assembly's ``%=``
    labels, numbered across the file) renamed by their order in the kernel."""
    labels = {}
    for m in _LABEL.finditer(body):
        labels.setdefault(m.group(1), f"<L{len(labels)}>")
    if not labels:
        return body
    pattern = re.compile(r"(?<![\w$])(" + "|".join(re.escape(x) for x in sorted(labels, key=len, reverse=True))
                         + r")(?![\w$])")
    return pattern.sub(lambda m: labels[m.group(1)], body)


def _body(name: str, lines: list[str], renames: list[tuple[str, str]]) -> list[str]:
    body = "\n".join(lines).replace(name, "<kernel>")
    return normalise(_relabel(_LINKAGE.sub(".entry ", body, count=1)), renames)


def entry_key(name: str, lines: list[str], renames: list[tuple[str, str]]) -> str:
    """A kernel's body with its own name, its labels and the other symbols normalised: equal keys, equal code."""
    return "\n".join(_body(name, lines, renames))


def _first_difference(a: list[str], b: list[str]) -> tuple[int, int]:
    """(index of the first differing line, count of differing lines) of two line lists, by position."""
    bad = [i for i, (x, y) in enumerate(zip(a, b)) if x != y] + ([min(len(a), len(b))] if len(a) != len(b) else [])
    return (bad[0] if bad else -1), len(bad)


def match_kernels(base: dict[str, dict[str, list[str]]], head: dict[str, dict[str, list[str]]],
                  renames: list[tuple[str, str]]) -> tuple[dict[tuple[str, str], tuple[str, str] | None], set]:
    """For every head kernel (source, name), the base kernel (source, name) whose body it has, or None; and the set of
    base kernels that no head kernel has. ``base`` / ``head``: source -> `entries`."""
    by_key: dict[str, list[tuple[str, str]]] = {}
    for src, ents in base.items():
        for name, lines in ents.items():
            by_key.setdefault(entry_key(name, lines, renames), []).append((src, name))
    found: dict[tuple[str, str], tuple[str, str] | None] = {}
    seen: set[tuple[str, str]] = set()
    for src, ents in head.items():
        for name, lines in ents.items():
            hits = by_key.get(entry_key(name, lines, []), [])
            # the same kernel of the same source first, then any kernel of the same source, then any
            hit = next((h for h in hits if h == (src, name)), None) or next((h for h in hits if h[0] == src), None) \
                or (hits[0] if hits else None)
            found[(src, name)] = hit
            if hit is not None:
                seen.add(hit)
    # a base kernel is matched when any base kernel of the same body was (two builds may compile to one body)
    seen_keys = {entry_key(n, base[s][n], renames) for s, n in seen}
    unmatched = {(s, n) for s, ents in base.items() for n, lines in ents.items()
                 if entry_key(n, lines, renames) not in seen_keys}
    return found, unmatched


def _same_name(mangled: str) -> str:
    """A mangled name without its translation unit's hash (see _INTERNAL)."""
    return _INTERNAL.sub(r"\1_\2", mangled)


def _nearest(name: str, lines: list[str], base: dict[str, dict[str, list[str]]], renames) -> str:
    """The base kernel closest to a changed head kernel (fewest differing lines by position), described."""
    mine = _body(name, lines, [])
    best = None
    for src, ents in base.items():
        for bname, blines in ents.items():
            if abs(len(blines) - len(lines)) > max(50, len(lines) // 10):
                continue
            theirs = _body(bname, blines, renames)
            first, n = _first_difference(theirs, mine)
            if best is None or n < best[0]:
                best = (n, src, bname, first, theirs, len(theirs))
    if best is None or best[0] > best[5] // 2:
        return "new: no base kernel resembles it"
    n, src, bname, first, theirs, total = best
    dem = _demangle([bname]).get(bname, bname)
    return (f"nearest base kernel {src}: {dem}: {n} of {total} lines differ, first at line {first + 1}:\n"
            f"    base: {theirs[first] if first < len(theirs) else '<eof>'}\n"
            f"    head: {mine[first] if first < len(mine) else '<eof>'}")


def _tree(rev: str, dest: Path) -> Path:
    """kernels/cuda of git revision rev, extracted under dest."""
    archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", rev, "kernels/cuda"], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest / "kernels" / "cuda"


def _ptx_name(src: str, arch: str) -> str:
    return f"{Path(src).stem}.sm{arch}.ptx"


def _by_file(jobs, outs, base_label: str, pairs) -> int:
    failed = 0
    for s, a in jobs:
        if (s, a, "base") not in outs:
            print(f"{s:12s} compute_{a:4s} NEW (not in {base_label})")
            continue
        raw_b = outs[(s, a, "base")].read_text()
        raw_h = outs[(s, a, "head")].read_text()
        n = raw_h.count(".entry ")
        if raw_b == raw_h:
            print(f"{s:12s} compute_{a:4s} identical bytes ({n} kernels)")
            continue
        nb, nh = normalise(raw_b, pairs), normalise(raw_h, [])
        if nb == nh:
            print(f"{s:12s} compute_{a:4s} identical after name normalisation ({n} kernels, {len(nh)} lines)")
            continue
        failed += 1
        first, count = _first_difference(nb, nh)
        print(f"{s:12s} compute_{a:4s} DIFFERENT: {len(nb)} vs {len(nh)} lines, {count} differ; "
              f"first at line {first + 1}:\n  base: {nb[first] if first < len(nb) else '<eof>'}\n"
              f"  head: {nh[first] if first < len(nh) else '<eof>'}")
    return failed


def _by_kernel(jobs, outs, archs, pairs) -> int:
    failed = 0
    for a in archs:
        base = {s: entries(outs[(s, x, "base")].read_text()) for s, x, side in outs if side == "base" and x == a}
        head = {s: entries(outs[(s, x, "head")].read_text()) for s, x, side in outs if side == "head" and x == a}
        found, unmatched = match_kernels(base, head, pairs)
        names = _demangle(n for _, n in found)
        for s in sorted(head):
            lab = s.startswith(LAB_DIR + "/")
            mine = sorted((n for src, n in found if src == s), key=lambda n: names.get(n, n))
            same = [n for n in mine if found[(s, n)] is not None]
            moved = [n for n in same if found[(s, n)][0] != s or _same_name(found[(s, n)][1]) != _same_name(n)]
            bad = [n for n in mine if found[(s, n)] is None]
            status = "identical" if not bad else ("changed (lab build)" if lab else "DIFFERENT")
            print(f"{s:24s} compute_{a:4s} {len(mine)} kernels: {len(same)} identical to a base kernel's PTX "
                  f"({len(moved)} under another name or source), {len(bad)} without one: {status}")
            for n in moved:
                bs, bn = found[(s, n)]
                print(f"    = {names.get(n, n)}\n      was {bs}: {_demangle([bn]).get(bn, bn)}")
            for n in bad:
                print(f"    {'~' if lab else '!'} {names.get(n, n)}\n      "
                      + _nearest(n, head[s][n], base, pairs).replace("\n", "\n      "))
            if bad and not lab:
                failed += len(bad)
        gone = sorted(unmatched)
        if gone:
            dem = _demangle(n for _, n in gone)
            print(f"compute_{a}: {len(gone)} base kernels no head kernel has (builds removed):")
            for s, n in gone:
                print(f"    - {s}: {dem.get(n, n)}")
    return failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attention_conformance.kernels.cuda.ptx_diff",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="main", help="git revision to compare against (default main)")
    ap.add_argument("--base-ptx", default=None, help="folder of base PTX files <source>.sm<arch>.ptx (an earlier "
                    "--keep's base folder) instead of compiling --base")
    ap.add_argument("--head", default=None, help="git revision to compare (default: the working tree)")
    ap.add_argument("--arch", default="80,90a", help="comma-separated virtual architectures (default 80,90a)")
    ap.add_argument("--rename", action="append", default=None, metavar="OLD=NEW",
                    help=f"demangled-name rewrite applied to the base PTX (default: {' '.join(DEFAULT_RENAMES)})")
    ap.add_argument("--with-fa3", action="store_true", help="also compare fa3_fwd.cu (90a only)")
    ap.add_argument("--kernels", action="store_true", help="compare kernel by kernel (see the module doc)")
    ap.add_argument("--lab", action="store_true", help="with --kernels: also compile the lab sources (lab/*.cu)")
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
    if args.base_ptx is not None and not Path(args.base_ptx).is_dir():
        print(f"ptx_diff: --base-ptx {args.base_ptx}: not a directory", file=sys.stderr)
        return 2
    archs = [a.strip() for a in args.arch.split(",") if a.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        for side in ("base", "head", f"head/{LAB_DIR}"):
            (work / side).mkdir(parents=True, exist_ok=True)
        base_dir = None if args.base_ptx else _tree(args.base, work / "base")
        head_dir = _tree(args.head, work / "head") if args.head else CUDA_DIR
        srcs = sorted(p.name for p in head_dir.glob("*.cu") if args.with_fa3 or p.name != "fa3_fwd.cu")
        if args.kernels and args.lab:
            srcs += sorted(f"{LAB_DIR}/{p.name}" for p in (head_dir / LAB_DIR).glob("*.cu"))
        jobs = [(s, a) for s in srcs for a in archs if not Path(s).name.startswith("fa3") or a == "90a"]
        outs: dict[tuple[str, str, str], Path] = {}
        todo = []
        for s, a in jobs:
            todo.append((s, a, "head", head_dir, work / "head" / _ptx_name(s, a)))
            if s.startswith(LAB_DIR + "/"):
                continue
            if args.base_ptx:
                kept = Path(args.base_ptx) / _ptx_name(s, a)
                if kept.is_file():
                    outs[(s, a, "base")] = kept
            elif (base_dir / s).is_file():
                todo.append((s, a, "base", base_dir, work / "base" / _ptx_name(s, a)))
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futs = {(s, a, side): pool.submit(compile_ptx, nvcc, d, s, a, out) for s, a, side, d, out in todo}
            outs.update({k: f.result() for k, f in futs.items()})
        if args.kernels:
            failed = _by_kernel(jobs, outs, archs, pairs)
        else:
            failed = _by_file(jobs, outs, args.base_ptx or args.base, pairs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
