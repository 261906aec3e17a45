"""flashinfer_prebuild.py's offline mode, the parts that need no FlashInfer: the faked device (offline_cuda), the
architecture flag and the recorder's stubs (CPU; the recording itself needs flashinfer-python)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
DEVICE_TOOLS = Path(__file__).resolve().parents[2] / "tools" / "device"
if str(DEVICE_TOOLS) not in sys.path:
    sys.path.insert(0, str(DEVICE_TOOLS))

import flashinfer_prebuild as prebuild  # noqa: E402
import offline_cuda  # noqa: E402


@pytest.mark.parametrize(("text", "arch"), [("9.0a", (9, 0, "a")), ("8.0", (8, 0, "")), (" 12.0f", (12, 0, "f"))])
def test_parse_arch_reads_the_arch_list_spelling(text, arch):
    parsed = offline_cuda.parse_arch(text)
    assert (parsed.major, parsed.minor, parsed.suffix) == arch
    assert parsed.spelling == text.strip()


@pytest.mark.parametrize("text", ["sm_90a", "9", "9.0ab", ""])
def test_parse_arch_names_what_it_cannot_read(text):
    with pytest.raises(ValueError, match=repr(text)):
        offline_cuda.parse_arch(text)


def _fake_flashinfer(monkeypatch) -> tuple[types.ModuleType, object, object]:
    """A package "flashinfer" whose utils helpers are also bound in a submodule, as FlashInfer's modules import them."""

    def get_compute_capability(device):
        raise ValueError("device must be a cuda device")

    def device_support_pdl(device):
        return False

    utils = types.ModuleType("flashinfer.utils")
    utils.get_compute_capability, utils.device_support_pdl = get_compute_capability, device_support_pdl
    prefill = types.ModuleType("flashinfer.prefill")
    prefill.get_compute_capability = get_compute_capability
    package = types.ModuleType("flashinfer")
    package.utils = utils
    for name, mod in (("flashinfer", package), ("flashinfer.utils", utils), ("flashinfer.prefill", prefill)):
        monkeypatch.setitem(sys.modules, name, mod)
    return package, get_compute_capability, device_support_pdl


def test_offline_cuda_answers_as_the_arch_and_restores_everything(monkeypatch):
    package, capability, pdl = _fake_flashinfer(monkeypatch)
    before = (torch.version.cuda, torch.cuda.is_available, torch.cuda.get_device_capability, torch.empty)
    with offline_cuda.offline_cuda(offline_cuda.parse_arch("9.0a"), "13.0", flashinfer=package):
        assert torch.version.cuda == "13.0"
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1 and torch.cuda.current_device() == 0
        assert torch.cuda.get_device_capability() == (9, 0)
        props = torch.cuda.get_device_properties(0)
        assert (props.major, props.minor, props.multi_processor_count) == (9, 0, 132)
        cpu = torch.device("cpu")
        assert sys.modules["flashinfer.utils"].get_compute_capability(cpu) == (9, 0)
        assert sys.modules["flashinfer.prefill"].get_compute_capability(cpu) == (9, 0)
        assert sys.modules["flashinfer.utils"].device_support_pdl(cpu) is True
        pinned = torch.empty(8, dtype=torch.uint8, pin_memory=True)
        assert pinned.device.type == "cpu" and pinned.shape == (8,)
    assert (torch.version.cuda, torch.cuda.is_available, torch.cuda.get_device_capability, torch.empty) == before
    assert sys.modules["flashinfer.prefill"].get_compute_capability is capability
    assert sys.modules["flashinfer.utils"].device_support_pdl is pdl


def test_offline_cuda_restores_after_an_error():
    before = torch.cuda.get_device_capability
    with pytest.raises(RuntimeError, match="inside"):
        with offline_cuda.offline_cuda(offline_cuda.parse_arch("8.0"), "12.8"):
            assert torch.cuda.get_device_capability() == (8, 0)
            raise RuntimeError("inside")
    assert torch.cuda.get_device_capability is before


def test_offline_arch_sets_the_jit_target_and_refuses_another(monkeypatch):
    monkeypatch.delenv("FLASHINFER_CUDA_ARCH_LIST", raising=False)
    monkeypatch.delitem(sys.modules, "flashinfer", raising=False)
    assert prebuild._offline_setup("9.0a").capability == (9, 0)
    import os

    assert os.environ["FLASHINFER_CUDA_ARCH_LIST"] == "9.0a"
    monkeypatch.setenv("FLASHINFER_CUDA_ARCH_LIST", "8.0 9.0a")
    with pytest.raises(ValueError, match="FLASHINFER_CUDA_ARCH_LIST='8.0 9.0a'"):
        prebuild._offline_setup("9.0a")


def test_offline_arch_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        prebuild.main(["--offline-arch", "sm_90a", "--list"])
    assert exc.value.code == 2
    assert "'sm_90a'" in capsys.readouterr().err


def test_stubs_end_a_forward_on_the_gpu_and_note_calls_offline():
    with pytest.raises(prebuild._Recorded, match="m.run"):
        prebuild._Stub("m").run(1, out=None)
    calls: list[str] = []
    stub = prebuild._Stub("m", calls)
    assert stub.plan(1) is None and stub.packbits(2, "little", None) is None
    assert calls == ["m.plan", "m.packbits"]
