"""``python -m attention_conformance repro CASE_ID --impl NAME --standalone``: a repro file that needs only the library.

The plain ``repro`` snippet (`conformance.reproduce.snippet`) imports this package and hands its verdict to the
judge; a report to a library's maintainers needs a file they can run with nothing but NumPy, torch and their
library. `standalone` writes one for any (case, adapter) the writer has a plan for (the built-in adapters and plain
SDPA-signature functions, `conformance.reproduce.calls`):

- the case's inputs regenerated from its seed by plain NumPy code (`conformance.reproduce.inputs`), checked against the
  SHA-256 of the harness's own inputs before anything is called (a mismatch exits 2: not a faithful repro);
- the expected values in float64, computed in the file (`conformance.reproduce.source.reference_attention`: the
  contract of oracles/SEMANTICS.md with the case's mask, causal alignment, scale, softcap, sinks);
- the call the adapter makes (spelling, dtype, layout, flags), written out with torch and the library;
- the tolerances, computed here by the harness (conformance/TOLERANCES.md): for a quantity of at most
  `PER_ELEMENT_MAX` elements each element's own bound, so the file fails exactly where the harness does; for a larger
  one the largest per-element bound over the compared elements, so that the file's exit status 1 implies the
  harness's FAIL on that quantity, while the harness, holding each element to its own bound, can fail a case whose
  file exits 0 (the file prints the worst element either way);
- the worst element of each quantity printed (index, expected, observed, tolerance), and the exit status: 1 while the
  defect stands (a value outside the tolerance, NaN/Inf where the expected value is finite, a row with no visible key
  whose LSE is finite, or the call raising), 0 once fixed, 2 when it cannot run here ("needs CUDA", a missing
  library, inputs that differ, the library refusing the call before computing anything).

Not reproduced by the file (the harness's other checks): which kernel ran, input mutation, determinism, the output
dtype, SDPA's LSE (torch returns none publicly; the harness reads the CPU flash backend's private op).
"""

from __future__ import annotations

import inspect
import json
import shlex
import textwrap

import numpy as np

from attention_conformance.cases.case import Case
from attention_conformance.cases.inputs import make_inputs
from attention_conformance.reproduce import source as repro_source
from attention_conformance.reproduce.calls import CallPlan, family_of, plan_call
from attention_conformance.reproduce.inputs import UnwritableCase, harness_arrays, inputs_helpers, inputs_source
from attention_conformance.verdict.bounds import OracleData, compute_oracle, forward_tolerance, lse_tolerance
from attention_conformance.verdict.precision import precision_model

__all__ = ["UnwritableCase", "default_device", "standalone", "tolerances"]

#: `conformance.reproduce.source` names every file carries (its main() calls them)
_ALWAYS = ("LibraryDeclined", "round_to", "input_digest", "visible", "_plane", "reference_attention", "compared",
           "_where", "check_values", "check_lse")


#: quantities of at most this many elements carry a bound per element (larger ones: the largest bound)
PER_ELEMENT_MAX = 4096


def default_device(spec: str) -> str:
    """The device a standalone file for `spec` runs on when none is given: cpu where its family runs there."""
    _, devices = family_of(spec)
    return "cpu" if "cpu" in devices else devices[0]


def tolerances(case: Case, od: OracleData, plan: CallPlan) -> dict[str, float]:
    """Per observed quantity, the largest per-element bound of conformance/TOLERANCES.md over its compared elements
    (the output's precision model: the input dtype's, or the plan's FP8 output)."""
    model = precision_model(case, plan.out_dtype, plan.out_scale) if plan.out_dtype else od.model
    rows_q = od.valid[..., None]
    rows_k = None if od.valid_k is None else od.valid_k[..., None]
    bounds = {"out": (forward_tolerance(od, model), rows_q & np.isfinite(od.out)),
              "lse": (lse_tolerance(od, model), od.valid & np.isfinite(od.lse))}
    for name in ("dq", "dk", "dv", "dsinks"):
        if name in od.grad_tol:
            rows = {"dq": rows_q, "dk": rows_k, "dv": rows_k}.get(name)
            bounds[name] = (od.grad_tol[name], np.ones(od.grad_tol[name].shape, dtype=bool) if rows is None else rows)
    out: dict[str, float | np.ndarray] = {}
    for name in plan.observed:
        tol, rows = bounds[name]
        sel = np.broadcast_to(rows, tol.shape)
        if tol.size <= PER_ELEMENT_MAX:  # a small case carries each element's bound: the file fails where we do
            out[name] = np.where(sel, tol, 0.0)
        else:
            out[name] = float(tol[sel].max()) if sel.any() else 0.0
    return out


def _tolerance_source(value: float | np.ndarray) -> str:
    """The ``TOLERANCE`` entry of one quantity: a number, or an array literal wrapped to the line length."""
    if not isinstance(value, np.ndarray):
        return repr(value)
    body = textwrap.fill(", ".join(repr(float(x)) for x in value.ravel()), width=100, initial_indent=" " * 8,
                         subsequent_indent=" " * 8)
    return f"np.array([\n{body}\n    ]).reshape({tuple(value.shape)!r})"


def _describe(case: Case) -> list[str]:
    """The case in words, one clause per feature (oracles/SEMANTICS.md section numbers)."""
    parts = [f"B={case.B}, Hq={case.Hq}, Hkv={case.Hkv}, Lq={case.Lq}, Lk={case.Lk}, d={case.d}, dv={case.dv}",
             (f"{case.dtype} inputs" if case.fp8 is None else
              f"FP8 {case.fp8.format} codes with one descale per tensor (§10)"),
             f"scale={case.scale!r} (§2)" if case.scale is not None else "scale 1/sqrt(d) (§2)"]
    if case.causal:
        parts.append(f"causal, {case.alignment.replace('_', '-')} alignment (§4)")
    if case.window is not None:
        parts.append(f"sliding window (left, right) = {case.window} (§5)")
    if case.chunk is not None:
        parts.append(f"chunks of {case.chunk} aligned positions (§19)")
    if case.mask is not None:
        parts.append(f"boolean mask, recipe {case.mask!r} (§6)")
    if case.bias is not None:
        parts.append(f"additive bias, recipe {case.bias!r} (§6)")
    if case.softcap is not None:
        parts.append(f"softcap {case.softcap!r} (§3)")
    if case.seqlens_q is not None or case.seqlens_k is not None:
        parts.append(f"sequence lengths q {case.seqlens_q}, k {case.seqlens_k} in padded tensors (§7)")
    if case.distribution != "normal":
        parts.append(f"inputs {case.distribution!r}" + (" (NaN in every padded row, §7)"
                                                          if case.distribution == "nan_padding" else ""))
    if case.layout != "contiguous":
        parts.append(f"layout {case.layout}")
    if case.sinks is not None:
        parts.append(f"attention sinks, recipe {case.sinks!r} (§18)")
    if case.backward:
        parts.append("forward and backward (§13)" + (" with an LSE cotangent" if case.lse_grad else ""))
    return parts


def _wrap(text: str, indent: str = "") -> str:
    import textwrap

    return textwrap.fill(text, width=116, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False)


def _docstring(case: Case, spec: str, plan: CallPlan, command: str) -> str:
    lines = [_wrap(f"Standalone repro: attention-conformance case {case.id} through {spec} on {plan.device}."), "",
             _wrap(f"The call: {plan.library}."), "",
             _wrap("The case: " + "; ".join(_describe(case)) + f"; inputs from seed {case.seed} (NumPy PCG64)."), "",
             _wrap("Expected values: exact attention in float64, computed below (reference_attention; the § numbers "
                   "cite oracles/SEMANTICS.md of attention-conformance). Tolerance: per quantity, the largest "
                   "per-element error bound the harness computed for this case (its TOLERANCES.md), so a value "
                   "beyond it fails the harness's check too."), "",
             _wrap("Exit status: 1 while the defect stands (a value outside its tolerance, NaN/Inf where the expected "
                   "value is finite, a finite LSE on a row with no visible key, or the call raising), 0 once every "
                   "compared value is within its tolerance, 2 when it cannot run here (needs CUDA, a missing "
                   "library, inputs that differ from the harness's, the library declining the call)."), "",
             "Needs numpy and torch" + ("" if plan.device == "cpu" else " (CUDA) and the library under test")
             + "; imports nothing from attention-conformance. Written by", _command_lines(command),
             _wrap(f"(the adapter's claim on this case: {plan.checked})."), '"""']
    return '#!/usr/bin/env python3\nr"""' + "\n".join(lines) + "\n"


def _command_lines(command: str) -> str:
    """`command` indented and continued over lines with a trailing backslash (the docstring is raw): 120 columns."""
    words, lines, line = shlex.split(command), [], "   "
    for w in words:
        if len(line) + len(w) + 3 > 116:
            lines.append(line + " \\")
            line = "       "
        line += " " + shlex.quote(w)
    return "\n".join(lines + [line])


def _expected_source(case: Case) -> str:
    seqlens_q = None if case.seqlens_q is None else list(case.seqlens_q)
    seqlens_k = None if case.effective_seqlens_k is None else list(case.effective_seqlens_k)
    grads = ', dout=inp["dout"]' if case.backward else ""
    if case.backward and case.lse_grad:
        grads += ', dlse=inp["dlse"]'
    what = "out and lse" + (", and the gradients of the backward" if case.backward else "")
    return (
        "def expected_values(inp):\n"
        f'    """The expected values in float64 (SEMANTICS.md): {what}."""\n'
        "    return reference_attention(\n"
        f'        inp["q"], inp["k"], inp["v"], scale={case.scale!r}, causal={case.causal!r}, '
        f'alignment="{case.alignment}",\n'
        f"        window={case.window!r}, chunk={case.chunk!r}, softcap={case.softcap!r}, "
        'mask=inp.get("mask"), bias=inp.get("bias"),\n'
        f'        seqlens_q={seqlens_q!r}, seqlens_k={seqlens_k!r}, sinks=inp.get("sinks"){grads})\n'
    )


_MAIN = '''\
def main():
    """Make the inputs, check they are the harness's, compute the expected values, call the library, compare."""
    print(f"case {CASE_ID}: {LIBRARY}, on {DEVICE}")
    reason = cannot_run_here()
    if reason:
        print(f"cannot run here: {reason}", file=sys.stderr)
        return 2
    print(f"versions: {versions()}")
    inp = make_inputs()
    digest = input_digest(inp)
    if digest != INPUTS_SHA256:
        print(f"cannot run here: the inputs made here (SHA-256 {digest}) are not the harness's ({INPUTS_SHA256}); "
              f"numpy {np.__version__}", file=sys.stderr)
        return 2
    expected = expected_values(inp)
    try:
        observed = run_library(inp)
    except LibraryDeclined as exc:
        print(f"cannot run here: the library declined the call: {' '.join(str(exc).split())[:600]}", file=sys.stderr)
        return 2
    except Exception as exc:
        traceback.print_exc()
        print(f"DEFECT: the call raised {type(exc).__name__} on a case this spelling accepts; exit status 1")
        return 1
    defect = False
    for name, got in observed.items():
        rows = compared(name, expected[name].shape, SEQLENS_Q, SEQLENS_K)
        if name == "lse":
            bad, lines = check_lse(expected[name], got, TOLERANCE[name], rows, plus_inf_ok=LSE_PLUS_INF_OK)
        else:
            bad, lines = check_values(name, expected[name], got, TOLERANCE[name], rows)
        defect = defect or bad
        print("\\n".join(lines))
    if defect:
        print("DEFECT: see the EXCEEDED / NaN lines above; exit status 1")
        return 1
    print("no defect: every compared value is within its tolerance; exit status 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def _helpers(names: set[str]) -> str:
    """The source of the named `conformance.reproduce.source` functions, in that module's order."""
    chosen = [obj for name, obj in vars(repro_source).items()
              if name in names and (inspect.isfunction(obj) or inspect.isclass(obj))
              and obj.__module__ == repro_source.__name__]
    missing = names - {obj.__name__ for obj in chosen}
    if missing:
        raise RuntimeError(f"conformance.reproduce.source has no {sorted(missing)}")
    chosen.sort(key=lambda obj: inspect.getsourcelines(obj)[1])
    return "\n\n".join(inspect.getsource(obj).rstrip() + "\n" for obj in chosen)


def standalone(case: Case, spec: str, device: str | None = None, *, command: str | None = None) -> str:
    """The standalone repro file of `case` on adapter `spec` (module docstring). `UnwritableCase` (one line) for a
    case or adapter it cannot write: no plan for the adapter, a device the adapter does not run on, a case the
    adapter declines, a case feature with no written form."""
    from attention_conformance.adapters.registry import load, spec_error

    problem = spec_error(spec) if spec != "all" else "repro writes one adapter's call; name one adapter"
    if problem:
        raise UnwritableCase(f"--impl: {problem}")
    _, devices = family_of(spec)
    device = device or default_device(spec)
    if device.split(":")[0] not in devices:
        raise UnwritableCase(f"--impl {spec} runs on {' or '.join(devices)}, not {device}")
    device = device.split(":")[0]
    loaded = load(spec, device)
    if loaded.adapter is None:
        raise UnwritableCase(f"--impl {spec}: {loaded.reason}")
    inputs_code = inputs_source(case)  # before the adapter's plan: an unwritable case says so first
    inputs = make_inputs(case)
    plan = plan_call(loaded.adapter, spec, case, device, inputs)
    oracle = compute_oracle(case, inputs)
    tol = tolerances(case, oracle, plan)
    digest = repro_source.input_digest(harness_arrays(inputs))
    command = command or shlex.join(["python", "-m", "attention_conformance", "repro", case.id, "--impl", spec,
                                     "--device", device, "--standalone"])
    names = set(_ALWAYS) | set(inputs_helpers(case)) | set(plan.helpers)
    seqlens_k = None if case.effective_seqlens_k is None else list(case.effective_seqlens_k)
    constants = [
        _constant("CASE_ID", case.id),
        _constant("LIBRARY", plan.library),
        _constant("DEVICE", plan.device),
        _constant("SEQLENS_Q", None if case.seqlens_q is None else list(case.seqlens_q),
                  "query lengths (§7); None: every row is real"),
        _constant("SEQLENS_K", seqlens_k, "key lengths (§7); None: every key is real"),
        "# per quantity: the harness's error bound of each compared element (a quantity of more than "
        f"{PER_ELEMENT_MAX}\n# elements: the largest of them)",
        "TOLERANCE = {\n" + "".join(f'    "{k}": {_tolerance_source(v)},\n' for k, v in tol.items()) + "}",
        _constant("LSE_PLUS_INF_OK", plan.lse_plus_inf_ok, "+inf passes as the LSE of a row with no visible key"),
        "# SHA-256 of the harness's inputs for this case (input_digest): make_inputs() must give exactly these",
        _constant("INPUTS_SHA256", digest),
    ]
    defs = [_helpers(names), inputs_code, _expected_source(case), plan.cannot_run_here, plan.versions,
            plan.run_library, _MAIN]
    return (_docstring(case, spec, plan, command) + "\n"
            + "import hashlib\nimport math\nimport sys\nimport traceback\n\nimport numpy as np\n\n"
            + "\n".join(constants) + "\n\n\n" + "\n\n".join(d.rstrip("\n") + "\n" for d in defs))


def _constant(name: str, value: object, comment: str = "") -> str:
    """``NAME = value`` within 120 columns: a long string is split into adjacent literals inside parentheses."""
    line = f"{name} = {_literal(value)}" + (f"  # {comment}" if comment else "")
    if len(line) <= 120 or not isinstance(value, str):
        return line
    chunks, rest = [], value
    while len(rest) > 96:
        cut = rest.rfind(" ", 0, 96) + 1 or 96
        chunks.append(rest[:cut])
        rest = rest[cut:]
    chunks.append(rest)
    pad = " " * (len(name) + 4)
    return f"{name} = (" + f"\n{pad}".join(_literal(c) for c in chunks) + ")" + (f"  # {comment}" if comment else "")


def _literal(value: object) -> str:
    """A Python literal of `value`; strings in double quotes (JSON's string syntax, a subset of Python's)."""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else repr(value)
