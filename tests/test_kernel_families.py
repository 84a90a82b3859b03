"""The rules of the kernel families' rooms (issue 35), checked from the source and from a traced call.

- A kernel file is a leaf: a version package imports helpers below it, never another version; each family has one
  ``plan.py``, the only module that imports several versions.
- No private name (``_x``) crosses a module boundary: what another module needs is public.
- One dtype-name map, in :mod:`gpulab.dtypes`: no other module keeps a dict between dtype names, labels and dtypes.
- The public faces of :mod:`gpulab.attention` and :mod:`gpulab.rnn` are pinned.
- A call of ``flash_attention`` goes down through its modules and never climbs back into one it called from.
"""

from __future__ import annotations

import ast
import pathlib
import sys

import pytest
import torch

import gpulab
from gpulab import attention
from tests import _modules as package_modules

ROOT = pathlib.Path(gpulab.__file__).parent

# family -> its version packages; the plan is the one module allowed to import more than one of them
FAMILIES = {
    "gpulab.attention": ("gpulab.attention.v1", "gpulab.attention.v2", "gpulab.attention.v3"),
}


def _modules():
    for name, path in package_modules.modules().items():
        yield name, path, ast.parse(path.read_text(), filename=str(path))


def _imported(name: str, path: pathlib.Path, tree: ast.AST) -> set[str]:
    """Every gpulab module (or package) ``tree`` imports, anywhere in it, resolved to full dotted names; ``from a
    import b`` gives ``a`` and ``a.b`` (b a module or not)."""
    out = set()
    for base, names in package_modules.imports(name, path, tree):
        if base.startswith("gpulab"):
            out |= {base} | {f"{base}.{n}" for n in names}
    return out


def versions_imported(imports: set[str], versions) -> set[str]:
    return {v for v in versions for i in imports if i == v or i.startswith(v + ".")}


def family_offenders(modules) -> list[str]:
    """Modules that break the rule of the rooms: a non-plan module importing two versions, or a version importing
    another version."""
    bad = []
    for name, path, tree in modules:
        imports = _imported(name, path, tree)
        for family, versions in FAMILIES.items():
            used = versions_imported(imports, versions)
            own = next((v for v in versions if name == v or name.startswith(v + ".")), None)
            if own is not None and used - {own}:
                bad.append(f"{name} (version {own}) imports {sorted(used - {own})}")
            elif len(used) > 1 and name != f"{family}.plan":
                bad.append(f"{name} imports versions {sorted(used)}; only {family}.plan may choose between them")
    return bad


def test_only_the_plan_imports_several_versions_and_versions_are_leaves():
    assert family_offenders(_modules()) == []


def test_the_family_rule_catches_a_version_importing_another():
    src = "from gpulab.attention.v2 import forward\n"
    planted = [("gpulab.attention.v1.forward", ROOT / "attention/v1/forward.py", ast.parse(src))]
    assert family_offenders(planted) == ["gpulab.attention.v1.forward (version gpulab.attention.v1) imports "
                                         "['gpulab.attention.v2']"]  # fmt: skip
    two = "from gpulab.attention.v1 import forward\nfrom gpulab.attention.v2 import forward as f2\n"
    planted = [("gpulab.attention.function", ROOT / "attention/function.py", ast.parse(two))]
    assert "only gpulab.attention.plan may choose" in family_offenders(planted)[0]


def private_crossings(modules) -> list[str]:
    """``from gpulab.x import _y`` and ``module._y`` where ``module`` names a gpulab module, across modules."""
    bad = []
    for name, _path, tree in modules:
        gpulab_names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpulab"):
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        bad.append(f"{name}: from {node.module} import {a.name}")
                    gpulab_names.add(a.asname or a.name)
            elif isinstance(node, ast.Import):
                gpulab_names |= {a.asname or a.name for a in node.names if a.name.startswith("gpulab")}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in gpulab_names
                    and node.attr.startswith("_") and not node.attr.startswith("__")):  # fmt: skip
                bad.append(f"{name}: {node.value.id}.{node.attr}")
    return bad


def test_no_private_name_crosses_a_module_boundary():
    assert private_crossings(_modules()) == []


def test_the_private_name_check_catches_both_forms():
    src = "from gpulab.codesign.sweeps import _progress\nfrom gpulab import traffic\ntraffic._add(1)\n"
    found = private_crossings([("gpulab.x", ROOT / "x.py", ast.parse(src))])
    assert found == ["gpulab.x: from gpulab.codesign.sweeps import _progress", "gpulab.x: traffic._add"]


DTYPE_WORDS = {"bf16", "bfloat16", "fp16", "float16", "half", "fp32", "float32", "fp64", "float64", "tf32"}
TORCH_DTYPES = {"bfloat16", "float16", "float32", "float64", "half", "float", "double"}


def _dtype_like(node) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.lower().removeprefix("torch.") in DTYPE_WORDS
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch"
            and node.attr in TORCH_DTYPES)  # fmt: skip


def dtype_maps(modules) -> list[str]:
    """Dict literals (outside :mod:`gpulab.dtypes`) with at least two entries whose key and value are both dtype
    names or torch dtypes: a second name map."""
    bad = []
    for name, _path, tree in modules:
        if name == "gpulab.dtypes":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                pairs = sum(1 for k, v in zip(node.keys, node.values) if k is not None and _dtype_like(k)
                            and _dtype_like(v))  # fmt: skip
                if pairs >= 2:
                    bad.append(f"{name}:{node.lineno}")
    return bad


def test_one_dtype_name_map():
    assert dtype_maps(_modules()) == []


def test_the_dtype_map_check_catches_a_second_map():
    src = 'SHORT = {"bfloat16": "bf16", "float16": "fp16"}\nNAMES = {"bf16": torch.bfloat16, "fp16": torch.float16}\n'
    assert dtype_maps([("gpulab.x", ROOT / "x.py", ast.parse(src))]) == ["gpulab.x:1", "gpulab.x:2"]
    tolerances = 'TOL = {"float32": 1e-5, "bfloat16": 3e-2}\n'  # keyed by dtype, but not a name map
    assert dtype_maps([("gpulab.x", ROOT / "x.py", ast.parse(tolerances))]) == []


ATTENTION_ALL = [
    "flash_attention", "FlashAttentionFunction", "attention_forward", "attention_backward", "attention_forward_kernel",
    "attention_preprocess_kernel", "attention_dkdv_kernel", "attention_dq_kernel", "check_inputs", "block_schedule",
    "plot_block_schedule", "AttentionConfig", "attention_config", "smem_estimate", "candidates", "autotune", "tuned",
    "MAX_HEAD_DIM", "online_softmax", "online_softmax_kernel", "attention_reference", "logsumexp_reference",
    "causal_mask", "default_scale", "naive_attention", "softmax_naive", "softmax_safe", "softmax_online",
    "tiled_attention", "varlen_attn", "AuxRequest", "varlen_attention_reference", "visible_mask",
]  # fmt: skip


def test_public_face_of_attention_is_pinned():
    assert sorted(attention.__all__) == sorted(ATTENTION_ALL)
    assert all(hasattr(attention, n) for n in attention.__all__)


def call_chain(fn, package: str) -> list[str]:
    """The modules of ``package`` that ``fn()`` enters, in order, each listed when a call first enters it, and the
    (caller module, callee module) pairs of calls between two of them."""
    entered, edges = [], set()

    def profile(frame, event, arg):
        if event != "call":
            return
        callee = frame.f_globals.get("__name__", "")
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
        if callee.startswith(package):
            if callee not in entered:
                entered.append(callee)
            if caller.startswith(package) and caller != callee:
                edges.add((caller, callee))

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return entered, edges


def climbs(edges) -> list[tuple[str, str]]:
    """Calls that go back up: an edge (a, b) where b also calls a, directly or through others (a cycle)."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)

    def reaches(src, dst, seen=()):
        return any(n == dst or (n not in seen and reaches(n, dst, (*seen, n))) for n in graph.get(src, ()))

    return sorted((a, b) for a, b in edges if reaches(b, a))


def test_flash_attention_goes_down_to_its_kernels():
    q, k, v = (torch.randn(1, 2, 17, 16, requires_grad=True) for _ in range(3))
    attention.plan.clear_plan_cache()

    def call():
        attention.flash_attention(q, k, v, is_causal=True).sum().backward()

    entered, edges = call_chain(call, "gpulab.attention")
    assert entered[:2] == ["gpulab.attention.function", "gpulab.attention.plan"], entered
    assert "gpulab.attention.v1.forward" in entered and "gpulab.attention.v1.backward" in entered
    assert climbs(edges) == [], edges
    # the version modules are entered only from the plan
    assert {a for a, b in edges if b.startswith("gpulab.attention.v")} <= {"gpulab.attention.plan"}, edges


def test_the_chain_check_sees_a_climb():
    assert climbs({("a", "b"), ("b", "c"), ("c", "a")}) == [("a", "b"), ("b", "c"), ("c", "a")]
    assert climbs({("a", "b"), ("b", "c")}) == []


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_has_one_plan(family):
    base = ROOT.joinpath(*family.split(".")[1:])
    assert (base / "plan.py").is_file()
    for version in FAMILIES[family]:
        folder = ROOT.joinpath(*version.split(".")[1:])
        assert not folder.exists() or not (folder / "plan.py").exists(), f"{version} has a plan of its own"
