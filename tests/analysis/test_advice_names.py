"""Every torch_npu / torchair name npumagic prints in advice exists in the real torch_npu 2.14.0
wheel's source (read from the wheel, never installed): the fused optimizers, the suggested ops,
config attributes, dynamo backend names and torchair's compiler modes."""

from __future__ import annotations

import ast
import re
import zipfile
from pathlib import Path

import pytest

import npumagic

from ..conftest import ASCEND_RANKS, need, torch_npu_wheel

ADVICE_SOURCES = [Path(npumagic.__file__).parent / "analysis" / "advice.py",
                  *sorted((Path(npumagic.__file__).parent / "analysis" / "rules").glob("*.py"))]
NAME = re.compile(r"\b(?:torch_npu|torch\.npu|torchair)(?:\.[A-Za-z_]\w*)+")
BACKEND = re.compile(r"backend=[\"'](\w+)[\"']")
MODE = re.compile(r"config\.mode = [\"']([\w-]+)[\"']")
pytestmark = pytest.mark.slow  # unpacks the torch_npu wheel and imports torch._dynamo


@pytest.fixture(scope="module")
def torch_npu_source(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("torch_npu_2_14_0")
    with zipfile.ZipFile(torch_npu_wheel()) as wheel:
        wheel.extractall(root, [n for n in wheel.namelist() if n.startswith("torch_npu/") and n.endswith(".py")])
    return root / "torch_npu"


def _advice_texts() -> list[str]:
    """Every string constant in the advice modules (f-string parts included), and every fix
    the rules print on the shared Ascend samples."""
    texts = [node.value for path in ADVICE_SOURCES for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    for rank_dir in ASCEND_RANKS:
        if rank_dir.exists():
            texts += [f.fix for f in npumagic.advise(npumagic.analyze(rank_dir))]
    return texts


def _defines(source: str, name: str) -> bool:
    return bool(re.search(rf"^\s*(?:def|class)\s+{name}\b|^\s*{name}\s*[:=]|\bimport\b.*\b{name}\b|"
                          rf"[\"']{name}[\"']", source, re.M))


def _module_sources(path: Path) -> list[str]:
    """A module's source and that of the sibling modules it star-imports."""
    text = path.read_text(encoding="utf-8", errors="replace")
    out = [text]
    for rel in re.findall(r"^from \.(\w+) import \*", text, re.M):
        sibling = path.parent / f"{rel}.py"
        if sibling.is_file():
            out.append(sibling.read_text(encoding="utf-8", errors="replace"))
    return out


def resolves(root: Path, dotted: str) -> bool:
    """Whether ``dotted`` (torch_npu..., torch.npu... or torchair...) names something in the source."""
    parts = dotted.split(".")
    if parts[:2] == ["torch", "npu"]:  # torch_npu installs itself as torch.npu
        parts = ["torch_npu", "npu"] + parts[2:]
    elif parts[0] == "torchair":  # torch_npu ships torchair under dynamo/ and installs it as torchair
        parts = ["torch_npu", "dynamo", "torchair"] + parts[1:]
    path, rest = root, parts[1:]
    while rest and ((path / rest[0]).is_dir() or (path / f"{rest[0]}.py").is_file()):
        path = path / rest[0] if (path / rest[0]).is_dir() else path / f"{rest[0]}.py"
        rest = rest[1:]
    if not rest:
        return True
    module = path / "__init__.py" if path.is_dir() else path
    sources = _module_sources(module)
    if path == root:  # operators registered from C++ are documented in _op_plugin_docs.py
        sources.append((root / "_op_plugin_docs.py").read_text(encoding="utf-8"))
    if not any(_defines(s, rest[0]) for s in sources):
        return False
    package = path if path.is_dir() else path.parent  # deeper attributes: set on an object of the package
    return all(any(_defines(p.read_text(encoding="utf-8", errors="replace"), attr) for p in package.rglob("*.py"))
               for attr in rest[1:])


def test_every_torch_npu_name_in_advice_exists_in_the_2_14_0_source(torch_npu_source):
    names = sorted({m.rstrip(".") for text in _advice_texts() for m in NAME.findall(text)})
    assert {"torch_npu.optim.NpuFusedSGD", "torch_npu.npu_swiglu", "torch_npu.npu.set_compile_mode",
            "torch_npu.npu.config.allow_internal_format", "torchair.get_npu_backend"} <= set(names)
    missing = [n for n in names if not resolves(torch_npu_source, n)]
    assert not missing, f"not in torch_npu 2.14.0: {missing}"


def test_the_dynamo_backends_and_compiler_modes_advised_are_registered(torch_npu_source):
    texts = _advice_texts()
    backends = {b for t in texts for b in BACKEND.findall(t)}
    modes = {m for t in texts for m in MODE.findall(t)}
    assert backends == {"npu"} and modes == {"reduce-overhead"}
    registry = (torch_npu_source / "dynamo" / "__init__.py").read_text()
    assert re.search(r'def _register_npu_backend\(backend, name="npu"\)', registry)
    config = (torch_npu_source / "dynamo" / "torchair" / "configs" / "compiler_config.py").read_text()
    assert all(f'"{m}"' in config for m in modes)


def test_a_name_that_is_not_there_fails(torch_npu_source):
    assert resolves(torch_npu_source, "torch_npu.optim.NpuFusedAdamW")
    assert not resolves(torch_npu_source, "torch_npu.optim.NpuFusedAdamX")
    assert not resolves(torch_npu_source, "torch_npu.npu_swiglu_fast")
    assert not resolves(torch_npu_source, "torch_npu.npu.config.allow_private_format")


def test_the_shared_samples_are_read(torch_npu_source):
    # the printed fixes checked above come from real runs too, not only the source constants:
    # a real rank's fixes name torch_npu APIs, and each is in the wheel's source
    fixes = [f.fix for f in npumagic.advise(npumagic.analyze(need(ASCEND_RANKS[2])))]
    names = {m.rstrip(".") for fix in fixes for m in NAME.findall(fix)}
    assert names, fixes
    assert [n for n in names if not resolves(torch_npu_source, n)] == []
    assert set(names) <= {m.rstrip(".") for text in _advice_texts() for m in NAME.findall(text)}
