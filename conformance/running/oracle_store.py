"""What one process of a run computed for a case, handed to the run's other processes through a folder.

Under pytest-xdist the (case, adapter) tests of one case run in whichever worker is free, so without this every
worker that meets a case makes its inputs and FP64 oracle again: on the H200's gpu profile, 13 adapters over the
same large cases, the oracle alone is ~57 s of CPU per adapter (`CaseResult.oracle_seconds` of
reports/gpu/report.json.gz), most of it made 8 times over. ``run --workers`` hands whole cases to its workers and
needs none of this. The memory family's raw results travel the same way: each test of a growth series
(`verdict.growth.series_of`) needs the raw results of every case of the series for its adapter.

The store is one folder per run, made by the process that starts the workers and removed by it at the end
(`conformance.pytest_plugin`). Each entry is a pickle written under a temporary name and renamed into place; a
process that wants an entry takes an exclusive lock on the entry's lock file first, so that of the processes that
meet it together one computes it and the others wait and read it. An entry is the pure function of its key
(the case's id carries its seed: `cases.case.Case`), which is why a copy made by another process of the same run
is as good as one's own. A value that cannot be pickled, or weighs more than `MAX_BYTES`, is returned but not
stored; where files cannot be locked (no ``fcntl``) the store computes every value itself.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["MAX_BYTES", "OracleStore", "new_folder"]

T = TypeVar("T")

#: the largest entry written (the gpu profile's largest, a paged case's 1.6 GB of FP64 K / V, fits)
MAX_BYTES = 2 * 1024**3


def new_folder() -> str:
    """A fresh folder for one run's store, under the temporary directory."""
    return tempfile.mkdtemp(prefix="attention-conformance-store-")


class OracleStore:
    """Entries of one run, by key, shared by the run's processes through ``folder``."""

    def __init__(self, folder: str | os.PathLike[str]):
        self.folder = Path(folder)
        self.computed = 0  # entries this process computed
        self.loaded = 0  # entries this process read from another's file

    def _path(self, key: str, suffix: str) -> Path:
        return self.folder / (hashlib.sha1(key.encode()).hexdigest() + suffix)

    @contextmanager
    def _locked(self, key: str):
        if fcntl is None:
            yield False
            return
        with open(self._path(key, ".lock"), "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield True
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def fetch(self, key: str, compute: Callable[[], T], *, keep: Callable[[T], bool] = lambda _: True) -> T:
        """The entry of ``key``: read from the folder if some process of the run stored it, else ``compute()``
        (stored when ``keep`` says so: an entry that describes a failure to compute is better made again)."""
        with self._locked(key) as locked:
            path = self._path(key, ".pickle")
            if locked and path.is_file():
                with open(path, "rb") as fh:
                    value = pickle.load(fh)
                self.loaded += 1
                return value
            value = compute()
            self.computed += 1
            if locked and keep(value):
                self._write(path, value)
            return value

    def _write(self, path: Path, value: Any) -> None:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as fh:
                pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL)
            if tmp.stat().st_size <= MAX_BYTES:
                os.replace(tmp, path)
        except Exception:  # unpicklable, or a full disk: the other processes compute it again, never a verdict
            pass
        finally:
            tmp.unlink(missing_ok=True)
