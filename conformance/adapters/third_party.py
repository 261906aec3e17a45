"""Third-party implementations: ``--impl module:attr`` as an adapter object or a plain SDPA-signature function.

`load_impl(spec)` imports ``module`` from sys.path (PYTHONPATH honoured) and resolves ``attr``
(dotted names allowed) to an `Adapter`:

1. **An adapter object** - an `Adapter` instance, an `Adapter` subclass (instantiated with no
   arguments), a zero-argument factory returning one, or any object following the same protocol
   without subclassing (it is wrapped as is). The protocol (conformance/adapters/base.py):

   - ``capabilities``: a `Capabilities` - what it claims (dtypes, devices, masks, GQA, LSE, backward...);
     a claimed feature that then raises or is wrong is a FAIL;
   - ``forward(inputs: CaseInputs, case: Case, device: str) -> ForwardOutput``: inputs are FP64
     arrays exactly representable in ``case.dtype``; return float64 ``out`` [B, Hq, Lq, dv] and,
     optionally, natural-log ``lse`` [B, Hq, Lq] (declare ``lse=True``);
   - optional ``backward(inputs, case, device) -> BackwardOutput``: dq, dk, dv of sum(out * dout)
     (declare ``backward=True``);
   - optional ``supports(case, device)`` / ``unavailable_reason(device)`` returning a reason string or
     None, ``name``, ``version()``.

2. **A plain function with torch SDPA's signature**
   ``fn(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False)`` on
   [B, H, L, D] torch tensors (``is_causal`` = top-left, SEMANTICS.md §4; boolean mask True = attend,
   float mask added to the scores, §6). `wrap_sdpa_function` turns it into an adapter that:

   - takes what the function **declares** (``@conformance.claims(...)``, or ``--claims SPEC`` for a
     function one cannot edit; conformance/adapters/declared.py): dtypes, head dims, causal-only, alignments,
     sequence-length multiple, masks, GQA, backward. A case outside the declaration is NOT_SUPPORTED
     with the declaration named; a declared feature is claimed, so if it raises, that is a FAIL;
   - **probes** what is not declared, once per process and device (conformance/adapters/sdpa_probes.py):
     each dtype on shapes inside the declaration (undeclared: d = 16 tiny, then d = 64 and 128 at
     L = 128, non-causal and causal), then GQA (``enable_gqa=True``), dv != d, boolean mask, float
     bias, ``scale``, ``is_causal`` square and non-square, non-causal, backward through autograd, and
     each new head dim lazily. Only keyword arguments that differ from SDPA's defaults are passed, so
     a function without, say, ``enable_gqa`` still runs every MHA case. A probe that raises makes that
     feature NOT_SUPPORTED (the reason quotes the exception; a function no dtype probe runs is
     unavailable with every probe's exception listed); a feature that probed fine and raises later is
     a FAIL;
   - tests everything the signature can express: bottom-right causal, windows and varlen padding as
     boolean masks (padded keys masked out, padded query rows fully masked: SEMANTICS.md §17), fully
     masked rows, additive biases, non-contiguous (``bshd``) and stride-0 (``kv_broadcast``) inputs,
     backward. Softcap, FP8 and paged K/V (a block table) cannot be expressed: `supports` checks the
     declared capabilities, so those cases are NOT_SUPPORTED with the reason;
   - notes what its signature implies for that call (SDPA's keywords landing in ``**kwargs``, its own names for
     them, flash-attn's names and layout: `conformance.adapters.sdpa_signature`), with every call's results;
   - calls the function inside `conformance.cases.calldata.under_test`: an exception raised by the function
     (or by autograd through it) is the function's, a FAIL for a claimed case; an exception raised by
     the harness around it (translating the case, preparing tensors, reading the result) is
     HARNESS_ERROR, naming the harness frame.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from typing import Any

from attention_conformance.adapters import _torch_common as tc
from attention_conformance.adapters._torch_common import torch
from attention_conformance.adapters.base import (
    Adapter,
    BackwardOutput,
    Capabilities,
    CaseInputs,
    ForwardOutput,
    capability_reason,
)
from attention_conformance.adapters.declared import Claims, claims_of, claims_reason, cli_claims_for
from attention_conformance.adapters.sdpa_probes import PROBE_DTYPES, first_tensor, head_dim_reason, probe, sdpa_kwargs
from attention_conformance.adapters.sdpa_signature import signature_notes
from attention_conformance.cases.case import ALIGNMENTS, LAYOUTS, Case

__all__ = ["PROBE_DTYPES", "SdpaFunctionAdapter", "load_impl", "wrap_sdpa_function"]


class SdpaFunctionAdapter(Adapter):
    """Adapter around a plain function with torch SDPA's signature (see the module docstring)."""

    description = "third-party function with torch SDPA's signature, features probed"
    marks_code_under_test = True  # only the function itself (and autograd through it) is code under test

    def __init__(self, fn, name: str, claims: Claims | None = None):
        if not callable(fn):
            raise TypeError(f"{name!r} is not callable")
        self.fn = fn
        self.name = name
        # what the function declares (its `conformance.claims`), then --claims for it on top, then `claims`
        declared = claims_of(fn) or Claims()
        for extra in (cli_claims_for(name), claims):
            if extra is not None:
                declared = declared.merged(extra)
        self.claims = declared
        what = f"declares {declared.declared()}, the rest probed" if declared.declared() else "features probed"
        self.description = f"{name}: third-party SDPA-signature function ({what} once per device)"
        #: what its signature says about the call the harness makes (sdpa_signature.py), with every call's results
        self.signature_notes = signature_notes(fn)
        self.isolate = torch is not None and torch.cuda.is_available()  # CUDA faults cost one case

    def version(self) -> str:
        module = inspect.getmodule(self.fn)
        return str(getattr(module, "__version__", "unknown"))

    # -- probing (conformance/adapters/sdpa_probes.py) ----------------------------------------------
    def probes(self, device: str) -> dict[str, str | None]:
        """{feature: None if it ran or is declared, else why not}, computed once per process and device."""
        return probe(self.fn, self.claims, device).results

    # -- declared capabilities (the declaration, the probes for the rest) ----------------------------
    def caps_for(self, device: str) -> Capabilities:
        p = self.probes(device)
        c = self.claims
        ok = lambda f: p.get(f) is None  # noqa: E731
        causal_ok = ok("causal") or ok("causal_nonsquare")
        return Capabilities(
            dtypes=frozenset(c.dtypes) if c.dtypes is not None else
            frozenset(n for n in PROBE_DTYPES if ok(f"dtype:{n}")),
            devices=frozenset({device.split(":")[0]}),
            head_dims=frozenset(c.head_dims) if c.head_dims is not None else None,
            dv_ne_d=ok("dv_ne_d"),
            # declared alignments only restrict Lq != Lk (`claims_reason`); square causal is one semantics
            alignments=frozenset(ALIGNMENTS) if ok("bool_mask") or causal_ok else frozenset(),
            window=ok("bool_mask"),
            mask=ok("bool_mask"),
            bias=ok("float_bias"),
            softcap=False,
            gqa=ok("gqa"),
            varlen=ok("bool_mask"),
            chunk=ok("bool_mask"),
            custom_scale=ok("scale"),
            layouts=frozenset(LAYOUTS),  # dense layouts only: the signature has no block table
            lse=False,
            backward=ok("backward"),
            padding_as_mask=True,
            seqlen_multiple=c.seqlen_multiple,
            library_check="the probes of the function (conformance/adapters/sdpa_probes.py) and its declaration's "
                          "limits the fields here cannot state (conformance/adapters/declared.py)",
        )

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        device = "cuda" if torch is not None and torch.cuda.is_available() else "cpu"
        return self.caps_for(device)

    def unavailable_reason(self, device: str) -> str | None:
        reason = tc.device_unavailable_reason(device)
        if reason:
            return reason
        p = self.probes(device)
        if all(p[f"dtype:{n}"] is not None for n in PROBE_DTYPES):
            tried = "; ".join(f"dtype:{n}: [{p[f'dtype:{n}']}]" for n in PROBE_DTYPES)
            return f"{self.name} raised on every dtype probe on {device} (declare what it supports with " \
                   f"attention_conformance.claims or --claims): {tried}"
        return None

    def needs(self, case: Case) -> list[str]:
        """The probed features `case` uses, in the order they are checked."""
        from attention_conformance.adapters.torch_sdpa import _needs_attn_mask

        need = [f"dtype:{case.dtype}"]
        if case.Hq != case.Hkv:
            need.append("gqa")
        if case.dv != case.d:
            need.append("dv_ne_d")
        if _needs_attn_mask(case):
            need.append("float_bias" if case.bias is not None else "bool_mask")
        elif case.causal:
            need.append("causal" if case.Lq == case.Lk else "causal_nonsquare")
        else:
            need.append("noncausal")
        if case.scale is not None:
            need.append("scale")
        if case.backward:
            need.append("backward")
        return need

    def supports(self, case: Case, device: str) -> str | None:
        """The declaration's limits (`declared.claims_reason`), then the probes' errors for the features `case`
        uses (in the function's words), then what `caps_for` states (the signature carries no FP8, softcap, sinks,
        LSE, KV append or block table: its fields, stated there once), then the head-dim probe (a call of the
        function, made only for a case the signature can carry)."""
        reason = tc.device_unavailable_reason(device)
        if reason:
            return reason
        from attention_conformance.adapters.torch_sdpa import _needs_attn_mask

        declined = claims_reason(self.claims, case, needs_mask=_needs_attn_mask(case))
        if declined:
            return declined
        p = self.probes(device)
        for feature in self.needs(case):
            if p.get(feature) is not None:
                return f"probe '{feature}' raised on {device}: {p[feature]}"
        reason = capability_reason(self.caps_for(device), case, device)
        if reason:
            return reason
        if self.claims.head_dims is None:
            err = head_dim_reason(self.fn, self.claims, device, case.d, case.dv)
            if err is not None:
                return f"probe 'head_dim:{case.d}x{case.dv}' raised on {device}: {err}"
        return None

    # -- the call ---------------------------------------------------------------------------------
    def _call(self, t: tc.Materialized, mask_t, is_causal: bool, case: Case):
        """The function under test on the prepared tensors; what it raises (or returns instead of a tensor)
        is its own, not the harness's (`_torch_common.code_under_test`)."""
        kwargs = sdpa_kwargs(attn_mask=mask_t, is_causal=is_causal, scale=case.scale, gqa=case.Hq != case.Hkv)
        with tc.code_under_test(t.q.device):
            out = first_tensor(self.fn(t.q, t.k, t.v, **kwargs))
            if not isinstance(out, torch.Tensor):
                raise TypeError(f"{self.name} returned {type(out).__name__}, not a torch.Tensor")
        return out

    def forward(self, inputs: CaseInputs, case: Case, device: str) -> ForwardOutput:
        from attention_conformance.adapters.torch_sdpa import prepare_sdpa_call

        c = prepare_sdpa_call(inputs, case, device)
        with tc.KernelRecorder(device) as rec:
            out = self._call(c.t, c.mask_t, c.is_causal, case)
        return ForwardOutput(
            out=tc.to_numpy(out), out_dtype=tc.dtype_name(out.dtype), out_device=str(out.device),
            kernels=rec.names, mutated_inputs=c.mutated(), notes=self._notes(rec),
        )

    def backward(self, inputs: CaseInputs, case: Case, device: str) -> BackwardOutput:
        from attention_conformance.adapters.torch_sdpa import prepare_sdpa_call

        if inputs.dout is None:
            raise ValueError(f"{self.name}.backward needs inputs.dout (case {case.id})")
        c = prepare_sdpa_call(inputs, case, device, backward=True)
        with torch.enable_grad(), tc.KernelRecorder(device) as rec:
            out = self._call(c.t, c.mask_t, c.is_causal, case)
            with tc.code_under_test(device):  # autograd runs the function's own backward graph
                grads = torch.autograd.grad(out, (c.t.q, c.t.k, c.t.v), grad_outputs=c.t.dout)
        return tc.autograd_output(out, grads, rec, c.mutated(), notes=self._notes(rec))

    def _notes(self, rec: tc.KernelRecorder) -> list[str]:
        return [*self.signature_notes, *([rec.error] if rec.error else [])]


def wrap_sdpa_function(fn, name: str | None = None, claims: Claims | None = None) -> SdpaFunctionAdapter:
    """An adapter for `fn`, a function with torch SDPA's signature (see the module docstring); ``claims``
    adds to what `fn` declares (conformance/adapters/declared.py)."""
    return SdpaFunctionAdapter(fn, name or getattr(fn, "__qualname__", repr(fn)), claims)


class _ProtocolAdapter(Adapter):
    """Wraps an object that follows the adapter protocol without subclassing `Adapter`."""

    def __init__(self, obj, name: str):
        self.obj = obj
        self.name = str(getattr(obj, "name", "") or name)
        self.description = str(getattr(obj, "description", "") or f"{name}: third-party adapter object")
        self.isolate = bool(getattr(obj, "isolate", False))

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        return self.obj.capabilities

    def unavailable_reason(self, device: str) -> str | None:
        fn = getattr(self.obj, "unavailable_reason", None)
        return fn(device) if fn else None

    def supports(self, case: Case, device: str) -> str | None:
        fn = getattr(self.obj, "supports", None)
        return fn(case, device) if fn else super().supports(case, device)

    def version(self) -> str:
        fn = getattr(self.obj, "version", None)
        return str(fn()) if fn else "unknown"

    def forward(self, inputs: CaseInputs, case: Case, device: str) -> ForwardOutput:
        return self.obj.forward(inputs, case, device)

    def backward(self, inputs: CaseInputs, case: Case, device: str) -> BackwardOutput:
        fn = getattr(self.obj, "backward", None)
        if fn is None:
            raise NotImplementedError(f"{self.name} has no backward")
        return fn(inputs, case, device)


def _is_protocol_object(obj) -> bool:
    return callable(getattr(obj, "forward", None)) and isinstance(getattr(obj, "capabilities", None), Capabilities)


def _zero_arg_callable(obj) -> bool:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return False
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in sig.parameters.values())


def is_file_spec(spec: str) -> bool:
    """Whether ``spec`` names a file (``path/to/file.py:attr``) rather than an importable ``module:attr``."""
    module = spec.rsplit(":", 1)[0]
    return module.endswith(".py") or "/" in module or os.sep in module


def import_module_or_file(name: str) -> Any:
    """``importlib.import_module(name)``, or, for a path to a ``.py`` file, that file imported as a module of its
    stem (registered in ``sys.modules`` so that pickling its objects for worker processes finds it)."""
    if not (name.endswith(".py") or "/" in name or os.sep in name):
        return importlib.import_module(name)
    path = os.path.abspath(name)
    if not os.path.isfile(path):
        raise ImportError(f"no such file: {path}")
    stem = os.path.splitext(os.path.basename(path))[0]
    if stem in sys.modules and os.path.abspath(getattr(sys.modules[stem], "__file__", "") or "") == path:
        return sys.modules[stem]
    spec = importlib.util.spec_from_file_location(stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path} as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[stem] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[stem]
        raise
    return module


def load_impl(spec: str) -> Adapter:
    """The adapter named by ``module:attr`` (attr may be dotted); see the module docstring."""
    if ":" not in spec:
        raise ValueError(f"--impl {spec!r}: expected MODULE:ATTR or path/to/file.py:ATTR, "
                         "e.g. attention_conformance.examples.good_sdpa:attention")
    module_name, attr = spec.rsplit(":", 1) if is_file_spec(spec) else spec.split(":", 1)
    try:
        obj: Any = import_module_or_file(module_name)
    except ImportError as exc:
        raise ImportError(f"--impl {spec!r}: cannot import module {module_name!r}: {exc}") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise AttributeError(f"--impl {spec!r}: {type(obj).__name__} {getattr(obj, '__name__', obj)!r} "
                                 f"has no attribute {part!r}")
        obj = getattr(obj, part)
    if isinstance(obj, Adapter):
        return obj
    if isinstance(obj, type) and issubclass(obj, Adapter):
        return obj()
    if _is_protocol_object(obj):
        return _ProtocolAdapter(obj, spec)
    if isinstance(obj, type):
        instance = obj()
        if isinstance(instance, Adapter):
            return instance
        if _is_protocol_object(instance):
            return _ProtocolAdapter(instance, spec)
        raise TypeError(f"--impl {spec!r}: {obj.__name__}() is neither an Adapter nor follows its protocol")
    if callable(obj) and _zero_arg_callable(obj):
        made = obj()
        if isinstance(made, Adapter):
            return made
        if _is_protocol_object(made):
            return _ProtocolAdapter(made, spec)
        raise TypeError(f"--impl {spec!r}: the zero-argument factory returned {type(made).__name__}, not an Adapter")
    if callable(obj):
        return wrap_sdpa_function(obj, spec)
    raise TypeError(f"--impl {spec!r}: {type(obj).__name__} is neither an Adapter, an adapter factory, nor a "
                    "function with torch SDPA's signature")
