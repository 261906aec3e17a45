"""Where a kernel's registers spill: the STL / LDL of each function of a cubin, by source line and by straight-line
region (lab tool; not installed).

    python tools/sass_spills.py TU.cu [--function REGEX]      # nvcc -cubin for sm_90a (-I kernels/cuda/include)
    python tools/sass_spills.py --sass FILE.sass [--function REGEX]   # `nvdisasm -c -g` text at hand

ptxas prints one spill total a function; a warp-specialised kernel needs to know which warps spill and on which path.
Regions are the code between unconditional branches, `EXIT` and `USETMAXREG` (where a producer / consumer split
begins), so the straight-line paths of a dispatch (the FA3 backward's four element-wise paths) show apart: each with
its instructions, STL / LDL, MUFU.EX2, F2FP (packs), HGMMA and the source files most of its lines come from. A TU is
compiled with `-lineinfo` so that every instruction names its source line (docs/fa3_backward.md used this to find
the 80-row build's spills).

nvdisasm is not in the build host's CUDA toolkit: --nvdisasm PATH, else $NVDISASM, else `nvdisasm` on PATH; the PyPI
wheel `nvidia-cuda-nvdisasm` carries one (`pip download --no-deps nvidia-cuda-nvdisasm`, unzip it:
nvidia/cu13/bin/nvdisasm).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Function", "Instr", "Region", "main", "parse", "regions", "report", "spills_by_line"]

REPO = Path(__file__).resolve().parents[1]
_FUNC = re.compile(r"^([A-Za-z_$][\w$]*):\s*$")
_SRC = re.compile(r'//## File "(?P<path>[^"]+)", line (?P<line>\d+)')
_INSTR = re.compile(r"/\*(?P<addr>[0-9a-f]{4,})\*/\s+(?P<text>[^;]*);")
#: instruction classes a region counts, by the opcode's first word
CLASSES = {"STL": "STL", "LDL": "LDL", "MUFU.EX2": "EX2", "F2FP": "F2FP", "HGMMA": "HGMMA"}


@dataclass
class Instr:
    """One SASS instruction: its address, text (predicate, opcode, operands) and source location (file, line)."""
    addr: int
    text: str
    src: tuple[str, int] | None

    @property
    def opcode(self) -> str:
        words = self.text.split()
        return words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "")

    @property
    def predicated(self) -> bool:
        return self.text.lstrip().startswith("@")


@dataclass
class Function:
    name: str
    instrs: list[Instr] = field(default_factory=list)


@dataclass
class Region:
    """Instructions [first, last] (addresses) of one straight-line stretch, with its class counts and source files."""
    first: int
    last: int
    count: int
    classes: Counter
    files: Counter


def parse(text: str) -> list[Function]:
    """The functions of `nvdisasm -c -g` output, each with its instructions in address order."""
    funcs: list[Function] = []
    src: tuple[str, int] | None = None
    for line in text.splitlines():
        m = _FUNC.match(line)
        if m and not line.startswith("."):
            funcs.append(Function(m.group(1)))
            src = None
            continue
        m = _SRC.search(line)
        if m:
            src = (m.group("path"), int(m.group("line")))
            continue
        m = _INSTR.search(line)
        if m and funcs:
            funcs[-1].instrs.append(Instr(int(m.group("addr"), 16), " ".join(m.group("text").split()), src))
    return funcs


def _short(path: str) -> str:
    """A source path relative to kernels/cuda/include where it lies there, else its file name."""
    parts = Path(os.path.normpath(path)).parts
    return "/".join(parts[parts.index("include") + 1:]) if "include" in parts else Path(path).name


def _class(ins: Instr) -> str | None:
    op = ins.opcode
    return next((c for prefix, c in CLASSES.items() if op == prefix or op.startswith(prefix + ".")), None)


def spills_by_line(fn: Function) -> Counter:
    """(source file, line, STL or LDL) -> count."""
    out: Counter = Counter()
    for ins in fn.instrs:
        c = _class(ins)
        if c in ("STL", "LDL"):
            path, line = ins.src if ins.src else ("?", 0)
            out[(_short(path), line, c)] += 1
    return out


def regions(fn: Function) -> list[Region]:
    """The straight-line stretches of `fn`: a region ends after an unpredicated BRA or EXIT, and before USETMAXREG."""
    out: list[Region] = []
    cur: list[Instr] = []

    def close() -> None:
        if cur:
            classes = Counter(c for c in map(_class, cur) if c)
            files = Counter(_short(i.src[0]) for i in cur if i.src)
            out.append(Region(cur[0].addr, cur[-1].addr, len(cur), classes, files))
            cur.clear()

    for ins in fn.instrs:
        if ins.opcode.startswith("USETMAXREG"):
            close()
        cur.append(ins)
        if not ins.predicated and ins.opcode.split(".")[0] in ("BRA", "EXIT"):
            close()
    close()
    return out


def report(funcs: list[Function], pattern: str = "", min_instrs: int = 100) -> str:
    """Markdown: for each function matching `pattern` that spills, its STL / LDL by source line and its regions of at
    least `min_instrs` instructions or with a spill."""
    lines: list[str] = []
    for fn in funcs:
        if pattern and not re.search(pattern, fn.name):
            continue
        by_line = spills_by_line(fn)
        if not by_line:
            continue
        st = sum(v for (_, _, k), v in by_line.items() if k == "STL")
        ld = sum(v for (_, _, k), v in by_line.items() if k == "LDL")
        lines += [f"## {fn.name}", "", f"{len(fn.instrs)} instructions, {st} STL, {ld} LDL", "",
                  "| source line | STL | LDL |", "|---|---|---|"]
        for (path, line) in sorted({(p, n) for p, n, _ in by_line}):
            lines.append(f"| {path}:{line} | {by_line[(path, line, 'STL')]} | {by_line[(path, line, 'LDL')]} |")
        lines += ["", "| region | instructions | STL | LDL | EX2 | F2FP | HGMMA | mostly from |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in regions(fn):
            if r.count < min_instrs and not (r.classes["STL"] or r.classes["LDL"]):
                continue
            top = ", ".join(f"{f} {n}" for f, n in r.files.most_common(2))
            c = r.classes
            lines.append(f"| {r.first:#x}-{r.last:#x} | {r.count} | {c['STL']} | {c['LDL']} | {c['EX2']} | "
                         f"{c['F2FP']} | {c['HGMMA']} | {top} |")
        lines.append("")
    return "\n".join(lines) + ("\n" if lines else "no function spills\n")


def _nvdisasm(given: str | None) -> str:
    found = given or os.environ.get("NVDISASM") or shutil.which("nvdisasm")
    if not found:
        raise SystemExit("nvdisasm not found: --nvdisasm PATH or $NVDISASM (the PyPI wheel nvidia-cuda-nvdisasm has "
                         "one)")
    return found


def _disassemble(tu: Path, nvdisasm: str, flags: list[str]) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "tu.cubin"
        cmd = ["nvcc", "-O3", "-std=c++17", "-lineinfo", "-I", str(REPO / "kernels/cuda/include"), "-gencode",
               "arch=compute_90a,code=sm_90a", *flags, "-cubin", str(tu), "-o", str(cubin)]
        subprocess.run(cmd, check=True)
        return subprocess.run([nvdisasm, "-c", "-g", str(cubin)], check=True, capture_output=True, text=True).stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tu", nargs="?", help="a CUDA translation unit to compile for sm_90a")
    ap.add_argument("--sass", help="nvdisasm -c -g output instead of a TU")
    ap.add_argument("--function", default="", help="only functions whose mangled name matches this regex")
    ap.add_argument("--nvdisasm", help="the nvdisasm binary")
    ap.add_argument("--min-instrs", type=int, default=100, help="list regions of at least this many instructions")
    ap.add_argument("--nvcc-flag", action="append", default=[], help="one more nvcc flag (repeatable)")
    args = ap.parse_args(argv)
    if bool(args.tu) == bool(args.sass):
        ap.error("give a TU or --sass FILE (one of them)")
    text = (Path(args.sass).read_text() if args.sass
            else _disassemble(Path(args.tu), _nvdisasm(args.nvdisasm), args.nvcc_flag))
    sys.stdout.write(report(parse(text), args.function, args.min_instrs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
