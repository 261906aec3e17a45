"""Make a hardware runner's own CUDA torch visible inside a tox environment (``tox -e gpu``).

A tox environment with ``system_site_packages = true`` sees the *base* interpreter's site packages. That is
where a runner's torch is when it was installed system-wide (nothing to do then), but not when it lives in a
virtual environment or a conda env (``/opt/torch/.venv``: the base interpreter knows nothing of it). This script
runs inside the tox environment, before its tests:

1. if ``import torch`` already works there, it does nothing;
2. otherwise it asks each ``python3`` / ``python`` on the runner's PATH (the PATH tox was started with, passed as
   ``--runner-path``) whether it imports torch, and writes the site directories of the first that does into
   ``runner_torch.pth`` in the tox environment's site-packages (``--site-packages``). Directories a ``.pth``
   file adds come after the environment's own, so the packages tox installed keep precedence and only what is
   missing (torch, its CUDA libraries) comes from the runner's environment.

3. in either case, first removes what an earlier *regular* install of this package left in that site-packages: a
   folder ``attention_conformance/`` of ``__pycache__`` folders alone (pytest's rewritten test modules, which pip's
   uninstall does not record). Python would import that folder as a namespace package ahead of the editable install
   tox.ini now makes, and every import of a submodule would fail (``No module named
   'attention_conformance.adapters.registry'``) on a runner whose tox environment predates the change.

Exit 1, with the interpreters tried, when no interpreter on the PATH imports torch: the GPU tests would all skip
(``--optional``: 0, for ``tox -e bench``, which also measures the CPU oracle).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

# the interpreter's site directories, then every other sys.path entry outside its standard library: directories
# that .pth files there add (a .pth file inside a directory another .pth file names is not processed, so they are
# listed themselves; e.g. the CUTLASS DSL's dsl_packages, which flash-attn-4 imports from)
_PROBE = ("import json, os, site, sys, sysconfig, torch; p = sysconfig.get_paths(); "
          "std = {os.path.realpath(p['stdlib']), os.path.realpath(p['platstdlib'])}; "
          "extra = [d for d in sys.path if d and os.path.isdir(d) and not any(os.path.realpath(d).startswith(s) "
          "and 'site-packages' not in d for s in std)]; "
          "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, "
          "'dirs': [p['purelib'], p['platlib'], *site.getsitepackages(), *extra]}))")
PTH_NAME = "runner_torch.pth"


def candidates(runner_path: str, names: tuple[str, ...] = ("python3", "python")) -> list[str]:
    """Executables named ``names`` on ``runner_path``, in PATH order, each real file once."""
    seen: set[str] = set()
    out = []
    for folder in runner_path.split(os.pathsep):
        for name in names:
            exe = os.path.join(folder, name)
            if os.path.isfile(exe) and os.access(exe, os.X_OK):
                real = os.path.realpath(exe)
                key = f"{folder}:{real}"
                if key not in seen and exe != sys.executable:
                    seen.add(key)
                    out.append(exe)
    return out


def probe(exe: str, timeout: float = 120.0) -> dict | str:
    """What ``exe`` says of its torch (version, CUDA, site directories), or why it said nothing."""
    try:
        done = subprocess.run([exe, "-c", _PROBE], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return json.loads(done.stdout.strip().splitlines()[-1])


def link(runner_path: str, site_packages: Path, torch_here: bool) -> tuple[int, str]:
    """Write (or leave out) ``runner_torch.pth`` in ``site_packages``; (exit status, what was done)."""
    pth = site_packages / PTH_NAME
    if torch_here and not pth.exists():
        return 0, "torch already importable in this environment; nothing to link"
    tried = []
    for exe in candidates(runner_path):
        said = probe(exe)
        if isinstance(said, dict):
            dirs = [d for d in dict.fromkeys(said["dirs"]) if os.path.isdir(d)]
            pth.write_text("".join(f"{d}\n" for d in dirs))
            return 0, f"torch {said['torch']} (CUDA {said['cuda']}) of {exe}: {', '.join(dirs)} -> {pth}"
        tried.append(f"{exe}: {said}")
    return 1, "no python on the runner's PATH imports torch; tried: " + ("; ".join(tried) or "none")


def remove_leftover(site_packages: Path, package: str = "attention_conformance") -> bool:
    """Remove ``site_packages/package`` where it holds nothing but ``__pycache__`` folders (no ``__init__.py``, no
    other file): the leftover of an earlier regular install. True where removed."""
    folder = site_packages / package
    if not folder.is_dir() or (folder / "__init__.py").exists():
        return False
    if any(p.is_file() and "__pycache__" not in p.relative_to(folder).parts for p in folder.rglob("*")):
        return False
    import shutil

    shutil.rmtree(folder)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runner-path", required=True, help="the PATH tox was started with")
    ap.add_argument("--site-packages", required=True, type=Path, help="the tox environment's site-packages")
    ap.add_argument("--optional", action="store_true",
                    help="no torch anywhere is not an error (tox -e bench also measures the CPU oracle)")
    args = ap.parse_args(argv)
    if remove_leftover(args.site_packages):
        print(f"tox_runner_site: removed {args.site_packages / 'attention_conformance'}: __pycache__ folders an "
              "earlier regular install left, which would hide the editable install")
    try:
        import torch  # noqa: F401

        torch_here = True
    except ImportError:
        torch_here = False
    code, said = link(args.runner_path, args.site_packages, torch_here)
    code = 0 if args.optional else code
    print(f"tox_runner_site: {said}", file=sys.stderr if code else sys.stdout)
    return code


if __name__ == "__main__":
    sys.exit(main())
