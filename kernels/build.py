"""Build every CUDA kernel in kernels/cuda/*.cu into one shared library, libattn_kernels.so.

``python -m attention_conformance.kernels.build [--out DIR] [--jobs N] [--force] [--resource-usage] [--arch 80,90a]
[--lab]``

One library, a plain C ABI (kernels/cuda/include/attn_params.h), loaded with ctypes by
kernels/cuda_lib.py: no torch C++ headers, so one build serves every torch version.

``--lab`` builds the lab's library instead, libattn_kernels_lab.so from kernels/cuda/lab/*.cu (attn_lab.h: the
ablation, tuning and timing builds, chosen by name through its launchers' arguments; loaded by kernels/cuda/lab), into
the same folder with its own objects and stamp. The default build never compiles it, so CI's build time is the
shipped library's; the lab sources live in a checkout, not in the installed package. Each ``.cu`` is
compiled to its own object in parallel (one nvcc per core), for sm_80 and sm_90a machine code,
then nvcc links them. A kernel that does not compile makes the command exit non-zero with nvcc's
messages (CI runs it on every commit).

Flags and why:
- ``-O3 -std=c++17``; ``-lineinfo`` so compute-sanitizer and ncu can name source lines (no speed cost);
- no ``--use_fast_math``: it would also flush denormals and swap ``logf``/``expf``/division for
  approximations everywhere, including the LSE. The kernels call the fast ``ex2.approx`` instruction
  explicitly where FlashAttention's exp2-with-folded-log2e trick needs it and keep ``logf`` exact
  for the LSE they write, so the accuracy claim stays honest and local;
- ``-Xcompiler -fPIC -shared``; the CUDA runtime is linked statically (nvcc's default), so the
  library needs only the driver.

A build stamp (hash of sources, headers, flags and nvcc version) makes a second call with nothing
changed a no-op ("up to date"), and a per-object key reuses the object of every ``.cu`` whose
source, headers and flags are unchanged (a header change recompiles everything, since any object
may include it); ``--force`` rebuilds all.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = ["BUILD_COMMAND", "CUDA_DIR", "DEFAULT_OUT", "LAB_DIR", "LAB_LIB_NAME", "LIB_NAME", "SOURCE_ARCHS",
           "BuildError", "build", "find_nvcc", "main", "nvcc_flags", "stale_reason"]

CUDA_DIR = Path(__file__).resolve().parent / "cuda"
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "build" / "kernels"
LIB_NAME = "libattn_kernels.so"
#: the lab build's sources and library (not part of the default build)
LAB_DIR = CUDA_DIR / "lab"
LAB_LIB_NAME = "libattn_kernels_lab.so"
DEFAULT_ARCHS = ("80", "90a")
#: the build step, as error messages and skip reasons name it
BUILD_COMMAND = "python -m attention_conformance.kernels.build"
# Sources built for a subset of the architectures (Hopper-only instructions: wgmma, setmaxnreg). When
# none of a source's architectures is requested it is built for the requested ones anyway: its kernels
# compile to empty bodies there and its launchers answer ATTN_ERR_UNSUPPORTED on such devices.
SOURCE_ARCHS = {"fa3_fwd.cu": ("90a",), "fa3_bwd.cu": ("90a",), "fa3_fp8_fwd.cu": ("90a",),
                "fa3_fwd_lab.cu": ("90a",), "fa3_bwd_lab.cu": ("90a",), "fa3_fp8_fwd_lab.cu": ("90a",)}


class BuildError(RuntimeError):
    """A compile or link step failed; the message carries nvcc's output."""


def find_nvcc() -> str | None:
    """nvcc from $NVCC, $CUDA_HOME/bin, $PATH or /usr/local/cuda/bin, else None."""
    candidates = [os.environ.get("NVCC")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(str(Path(os.environ[var]) / "bin" / "nvcc"))
    candidates += [shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    return None


def nvcc_flags(archs: tuple[str, ...] = DEFAULT_ARCHS, resource_usage: bool = False) -> list[str]:
    """Compile flags shared by every object (see the module docstring for the reasons)."""
    flags = ["-O3", "-std=c++17", "-lineinfo", "-Xcompiler", "-fPIC", "-I", str(CUDA_DIR / "include")]
    for a in archs:
        flags += ["-gencode", f"arch=compute_{a},code=sm_{a}"]
    if resource_usage:
        flags.append("--resource-usage")
    return flags


def _source_flags(src: Path, archs: tuple[str, ...], resource_usage: bool) -> list[str]:
    """`nvcc_flags` for one source: its `SOURCE_ARCHS` entry intersected with the requested archs."""
    own = tuple(a for a in archs if a in SOURCE_ARCHS.get(src.name, archs))
    return nvcc_flags(own or archs, resource_usage)


def _sources(lab: bool = False) -> list[Path]:
    return sorted((LAB_DIR if lab else CUDA_DIR).glob("*.cu"))


def _names(lab: bool) -> tuple[str, str, str]:
    """(library, stamp file, object folder) of the shipped build or the lab's."""
    return (LAB_LIB_NAME, "build_lab.stamp", "obj_lab") if lab else (LIB_NAME, "build.stamp", "obj")


def _common_key(nvcc: str, flags: list[str], lab: bool = False) -> str:
    """Hash of what every object depends on: nvcc's version, the flags and every header (the lab's with ``lab``).

    The flags are hashed with the checkout's own path left out (the include folder's): a checkout copied or moved
    (tox's session tree on a runner) holds the same sources and finds its library up to date, where an absolute path
    in the stamp rebuilt it (61 s of a 341 s tox -e gpu on an H100)."""
    h = hashlib.sha256()
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    h.update(version.encode())
    h.update(" ".join(flags).replace(str(CUDA_DIR), "<kernels/cuda>").encode())
    # every file of the include folder but Python's bytecode: the folder also holds a generator script
    # (hopper/gen_wgmma.py), and the __pycache__ its import writes beside it must not make the library stale
    headers = [p for p in (CUDA_DIR / "include").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    if lab:
        headers += [p for p in LAB_DIR.iterdir() if p.suffix in (".h", ".cuh")]
    for f in sorted(headers):
        h.update(str(f.relative_to(CUDA_DIR)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _stamp(nvcc: str, flags: list[str], lab: bool = False) -> str:
    h = hashlib.sha256(_common_key(nvcc, flags, lab).encode())
    for f in _sources(lab):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _object_key(src: Path, common: str) -> str:
    """Hash of one object's inputs: the shared part (nvcc, flags, headers) plus the source itself."""
    return hashlib.sha256(common.encode() + src.read_bytes()).hexdigest()


def _compile(nvcc: str, flags: list[str], src: Path, obj: Path, key: str, reuse: bool) -> tuple[Path, float, str]:
    key_file = obj.with_suffix(".key")
    if reuse and obj.is_file() and key_file.is_file() and key_file.read_text() == key:
        return src, 0.0, "(unchanged, reused)"
    t0 = time.perf_counter()
    cmd = [nvcc, *flags, "-c", str(src), "-o", str(obj)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise BuildError(f"nvcc failed on {src.name} (exit {proc.returncode}):\n{' '.join(cmd)}\n{proc.stderr}")
    key_file.write_text(key)
    return src, dt, proc.stderr


def stale_reason(out: Path | str = DEFAULT_OUT, archs: tuple[str, ...] = DEFAULT_ARCHS,
                 lab: bool = False) -> str | None:
    """Why ``out/libattn_kernels.so`` (``lab``: the lab's library) is not the build of this tree (None when it is);
    never compiles."""
    nvcc = find_nvcc()
    if nvcc is None:
        return "nvcc not found, so the build stamp cannot be checked"
    out = Path(out).resolve()
    lib_name, stamp_name, _ = _names(lab)
    lib, stamp_file = out / lib_name, out / stamp_name
    command = f"{BUILD_COMMAND} --out {out}" + (" --lab" if lab else "")
    if not lib.is_file():
        return f"{lib} does not exist (run `{command}`)"
    if not stamp_file.is_file() or stamp_file.read_text() != _stamp(nvcc, nvcc_flags(archs), lab):
        return (f"{lib} is stale: kernels/cuda sources, headers, flags or nvcc changed since it was built "
                f"(run `{command}`)")
    return None


def build(
    out: Path | str = DEFAULT_OUT,
    *,
    jobs: int | None = None,
    force: bool = False,
    resource_usage: bool = False,
    archs: tuple[str, ...] = DEFAULT_ARCHS,
    verbose: bool = True,
    lab: bool = False,
) -> Path:
    """Compile kernels/cuda/*.cu into ``out/libattn_kernels.so`` (``lab``: kernels/cuda/lab/*.cu into
    ``out/libattn_kernels_lab.so``); return its path.

    Raises `BuildError` (with nvcc's messages) when nvcc is missing or a step fails.
    """
    log = print if verbose else (lambda *a, **k: None)
    nvcc = find_nvcc()
    if nvcc is None:
        raise BuildError("nvcc not found (set NVCC or CUDA_HOME, or put nvcc on PATH)")
    sources = _sources(lab)
    if not sources:
        raise BuildError(f"no .cu files under {LAB_DIR if lab else CUDA_DIR}"
                         + (" (the lab sources are in a checkout, not in the installed package)" if lab else ""))
    out = Path(out).resolve()
    lib_name, stamp_name, obj_name = _names(lab)
    objdir = out / obj_name
    objdir.mkdir(parents=True, exist_ok=True)
    lib = out / lib_name
    flags = nvcc_flags(archs, resource_usage)
    stamp = _stamp(nvcc, flags, lab)
    stamp_file = out / stamp_name
    if not force and lib.is_file() and stamp_file.is_file() and stamp_file.read_text() == stamp:
        log(f"[kernels.build] {lib} up to date ({len(sources)} sources)")
        return lib
    jobs = jobs or max(1, os.cpu_count() or 1)
    log(f"[kernels.build] {nvcc}: {len(sources)} sources, archs {','.join(archs)}, {jobs} jobs")
    t0 = time.perf_counter()
    objs = [objdir / (s.stem + ".o") for s in sources]
    errors: list[str] = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        common = _common_key(nvcc, flags, lab)
        futures = [pool.submit(_compile, nvcc, _source_flags(s, archs, resource_usage), s, o,
                               _object_key(s, common), not force)
                   for s, o in zip(sources, objs)]
        for fut in futures:
            try:
                src, dt, msgs = fut.result()
            except BuildError as e:
                errors.append(str(e))
                continue
            log(f"  {src.name:24s} {dt:6.1f} s")
            if resource_usage and msgs:
                log(msgs)
    if errors:
        raise BuildError("\n".join(errors))
    tmp = out / (lib_name + ".tmp")
    link = [nvcc, "-shared", "-Xcompiler", "-fPIC", *[str(o) for o in objs], "-o", str(tmp)]
    proc = subprocess.run(link, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"link failed (exit {proc.returncode}):\n{' '.join(link)}\n{proc.stderr}")
    os.replace(tmp, lib)  # atomic: a loader never sees a half-written library
    stamp_file.write_text(stamp)
    log(f"[kernels.build] {lib} built in {time.perf_counter() - t0:.1f} s")
    return lib


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attention_conformance.kernels.build",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="output directory (default build/kernels)")
    ap.add_argument("--jobs", type=int, default=None, help="parallel nvcc processes (default: CPU count)")
    ap.add_argument("--force", action="store_true", help="rebuild even if the stamp matches")
    ap.add_argument("--resource-usage", action="store_true", help="print registers / shared memory per kernel")
    ap.add_argument("--arch", default=",".join(DEFAULT_ARCHS), help="comma-separated, e.g. 80,90a")
    ap.add_argument("--lab", action="store_true", help=f"build the lab's library ({LAB_LIB_NAME}) instead")
    args = ap.parse_args(argv)
    try:
        build(
            args.out,
            jobs=args.jobs,
            force=args.force,
            resource_usage=args.resource_usage,
            archs=tuple(a.strip() for a in args.arch.split(",") if a.strip()),
            lab=args.lab,
        )
    except BuildError as e:
        print(f"[kernels.build] FAILED\n{e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
