"""Markdown for the lab benchmarks' timing (tools/fa3_*_check_bench.py): what every figure is, and the host and wall
time per call beside the GPU time, from the rows `attention_conformance.kernels.timing.time_round_robin` fills."""

from __future__ import annotations

__all__ = ["FA3_REFS", "TIMING_NOTE", "by_gpu_time", "env_line", "host_table", "replaced_set_note"]

TIMING_NOTE = (
    "Every figure is **GPU time** per call (`kernels/timing.py` `measure`: CUDA-graph replay of the captured call, "
    "or back-to-back launches where a call cannot be captured; the method of each row is in the host table), the "
    "candidates of a row timed in turn in alternating rounds in one process, the median of the rounds. Ratios are "
    "the other's time over ours (> 1: ours is faster). Our kernels are called as a caller that launches them "
    "repeatedly would: `cuda_lib.bind` (the params struct filled and the workspace sized once, one foreign call "
    "per launch; capturable); the others through their Python entry points.")

#: the other candidates of the FA3 forward table (tools/fa3_check_bench.py), in its column order: (row key, title)
FA3_REFS = (("flash", "torch-flash"), ("cudnn", "cuDNN"), ("fa4", "FA4"), ("flashinfer", "FlashInfer"),
            ("xformers", "xformers"))


def env_line(env: dict, *more: str) -> str:
    """A table's header line from tools/cuda_fwd_check_bench.py `env_info` (or a stored set's env): date, commit,
    driver and versions, then ``more`` ("FA4 4.0.0b36", ...). A set from before the commit was recorded says so."""
    commit = env.get("commit")
    rev = f"{commit[:7]}{' (dirty tree)' if commit.endswith('-dirty') else ''}" if commit else "not recorded"
    parts = [f"Date {env.get('date')}", f"commit {rev}", f"driver {env.get('driver')}", f"CUDA {env.get('cuda')}",
             f"torch {env.get('torch')}", f"cuDNN {env.get('cudnn')}", *more]
    return "; ".join(parts) + "."


def by_gpu_time(rows: list[dict]) -> bool:
    """Whether a benchmark set was timed by GPU time (its rows name a ``*_method`` per candidate), not by the wall
    timer before it, which charged each call's host time."""
    return any(k.endswith("_method") for r in rows for k in r)


def replaced_set_note(previous: list[dict], previous_env: dict, gpu: str, wall_timer: str) -> str:
    """What a table's "before" figures are: "the set this one replaces (its date, its card where not this one)", then
    by GPU time as this one, what the change is made of (the card where it differs, the run, the kernels' own
    changes); or, timed by the wall timer before GPU time, ``wall_timer`` (how that timer charged each call)."""
    other = previous_env.get("gpu")
    another_card = bool(other) and other != gpu
    when = ", ".join(x for x in (previous_env.get("date"), other if another_card else None) if x)
    head = "the set this one replaces" + (f" ({when})" if when else "")
    if not by_gpu_time(previous):
        return f"{head}, {wall_timer}."
    cause = "the run (clocks, power) and the kernels' own changes in between"
    if another_card:
        cause = f"the card ({other} then, {gpu} now), " + cause
    return f"{head}, by GPU time as this one: the change is {cause}."


def _candidates(rows: list[dict]) -> list[str]:
    seen: list[str] = []
    for r in rows:
        for k in r:
            if k.endswith("_host_us") and k[: -len("_host_us")] not in seen:
                seen.append(k[: -len("_host_us")])
    return seen


def _host_wall(row: dict, name: str, queued: bool = False) -> str:
    """"host us / wall ms" (with ``queued``: "host us / queued us / wall ms") of candidate ``name`` in ``row``, "-"
    for a figure it lacks (it did not run)."""
    def fmt(key: str, spec: str) -> str:
        value = row.get(name + key)
        return "-" if value is None else format(value, spec)
    parts = [fmt("_host_us", ".1f")] + ([fmt("_host_queued_us", ".1f")] if queued else []) + [fmt("_wall_ms", ".3f")]
    return " / ".join(parts)


def host_table(rows: list[dict], label) -> list[str]:
    """Lines of a table: per row (``label(row)``), each candidate's host time per call (us: from a drained GPU, and
    behind queued work where measured), wall time per call (ms: event, call, event, synchronize: the timer before GPU
    time) and the GPU timing method; [] when no row has them."""
    names = _candidates(rows)
    if not names:
        return []
    queued = any(k.endswith("_host_queued_us") for r in rows for k in r)
    what = "host us / queued us / wall ms" if queued else "host us / wall ms"
    out = ["Host time per call (us: the CPU time of issuing one call, the GPU drained before it"
           + ("; queued: behind queued GPU work, as a training step issues its calls" if queued else "")
           + "), wall time per call (ms: event, call, event, synchronize: what the earlier timer measured) and how "
           "the GPU time was taken:", "",
           "| row | " + " | ".join(f"{n} {what}" for n in names) + " | method |",
           "|---|" + "---|" * (len(names) + 1)]
    for r in rows:
        cells = [_host_wall(r, n, queued) for n in names]
        methods = sorted({str(r[k]) for k in r if k.endswith("_method")})
        out.append(f"| {label(r)} | " + " | ".join(cells) + f" | {', '.join(methods) or '?'} |")
    return out + [""]
