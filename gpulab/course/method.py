"""How a learner's answer computes, read from the artifact itself (for graders that check the method, not only the
numbers).

- Triton answers: :func:`ttir` compiles a kernel (the grader's own kernel with the learner's ``@triton.jit`` function as
  a ``tl.constexpr``, or the learner's kernel) for sm_90 and returns its TTIR; :func:`dots` lists the ``tt.dot`` ops
  with their shapes, :func:`loads_and_stores` the memory ops with whether each is masked. Compiling needs no GPU and
  takes a fraction of a second: the interpreter's ``@triton.jit`` functions (``TRITON_INTERPRET=1``) are rebuilt as
  compiler ``JITFunction`` objects over the same Python code (their globals too), so nothing runs in a fresh process.
- PyTorch answers: :class:`OpTrace` records the aten ops a call actually runs (a ``TorchDispatchMode``), with what
  betrays autograd: a ``*_backward`` op, an op on a tensor that requires grad (``recorded``: with grad mode on, so
  autograd records it), a ``torch.func`` transform.
- Which ``@triton.jit`` kernels a call launches: :func:`launches` (an answer that claims to run its kernel, but
  computes with PyTorch instead, launches none).
  :func:`refuse_autograd` turns those into a failure that names the mistake; turning grad mode off around the call
  alone would be bypassed by ``torch.enable_grad()``.
"""

from __future__ import annotations

import contextlib
import re
import types
from dataclasses import dataclass

import torch
import triton
from torch.utils._python_dispatch import TorchDispatchMode

from gpulab import runtime
from gpulab.course.grading import raised_not_implemented

__all__ = ["Dot", "MemOp", "OpTrace", "dots", "launches", "loads_and_stores", "refuse_autograd", "ttir"]


# Triton's interpreter patches triton.language for a launch and restores it afterwards, but a call of one @triton.jit
# function from another (InterpretedFunction.__call__, Triton 3.6) patches without restoring: after such a launch the
# compiler would trip over interpreter stand-ins. Every patch's original is recorded here, first one wins, and put
# back for the length of a compile.
_MISSING = object()
_ORIGINALS: dict = {}


def _record_originals() -> None:
    try:
        from triton.runtime import interpreter  # noqa: PLC0415
    except ImportError:  # pragma: no cover - a Triton without the interpreter
        return
    scope = getattr(interpreter, "_LangPatchScope", None)
    if scope is None or getattr(scope.set_attr, "_gpulab_records", False):
        return
    original_set_attr = scope.set_attr

    def set_attr(self, obj, name, value):
        _ORIGINALS.setdefault((id(obj), name), (obj, getattr(obj, name, _MISSING)))
        original_set_attr(self, obj, name, value)

    set_attr._gpulab_records = True
    scope.set_attr = set_attr


_record_originals()


_COMPILER_FNS: dict = {}


def _library_fns():
    """(module, name, interpreted function) for every ``@triton.jit`` function of triton.language (``tl.sum``,
    ``tl.softmax``...): under ``TRITON_INTERPRET=1`` they are interpreted functions, which the compiler refuses."""
    import triton.language as tl  # noqa: PLC0415

    found = []
    for module in (tl, tl.standard, tl.math, tl.core):
        for name, value in list(vars(module).items()):
            if type(value).__name__ == "InterpretedFunction":
                found.append((module, name, value))
    return found


@contextlib.contextmanager
def _language_unpatched():
    """triton.language as the compiler knows it (before any interpreted launch, its library functions compiled
    ones, the interpreter knob off), for the length of the block."""
    import triton.experimental.gluon  # noqa: F401, PLC0415 - its first import asserts the knob matches the library

    now = []
    for module, name, value in _library_fns():
        now.append((module, name, value))
        setattr(module, name, _as_compiler_fn(value, _COMPILER_FNS))
    for (_, name), (obj, original) in list(_ORIGINALS.items()):
        current = getattr(obj, name, _MISSING)
        if current is not original:
            now.append((obj, name, current))
            if original is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, original)
    interpret = triton.knobs.runtime.interpret
    triton.knobs.runtime.interpret = False  # code generation reads it (nested calls, loops)
    try:
        yield
    finally:
        triton.knobs.runtime.interpret = interpret
        for obj, name, current in now:
            if current is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, current)


def _as_compiler_fn(fn, memo: dict):
    """A compiler ``JITFunction`` over the Python function of ``fn`` (an interpreted or compiled ``@triton.jit``
    function), with every ``@triton.jit`` function its globals name rebuilt the same way."""
    from triton.runtime.jit import JITFunction  # noqa: PLC0415

    py = getattr(fn, "fn", None)
    if py is None or not isinstance(py, types.FunctionType):
        return fn
    if id(py) in memo:
        return memo[id(py)]
    scope = dict(py.__globals__)
    copy = types.FunctionType(py.__code__, scope, py.__name__, py.__defaults__, py.__closure__)
    copy.__kwdefaults__, copy.__annotations__ = py.__kwdefaults__, dict(py.__annotations__)
    copy.__module__, copy.__qualname__, copy.__doc__ = py.__module__, py.__qualname__, py.__doc__
    jit = JITFunction(copy)
    memo[id(py)] = jit
    for name in py.__code__.co_names:
        value = scope.get(name)
        if hasattr(value, "fn") and isinstance(getattr(value, "fn", None), types.FunctionType):
            scope[name] = _as_compiler_fn(value, memo)
    return jit


def ttir(kernel, signature: dict, constexprs: dict, num_warps: int = 4) -> str:
    """The TTIR of ``kernel`` compiled for sm_90 (no GPU needed): ``signature`` maps each runtime argument to its type
    (``"*fp32"``, ``"i32"``), ``constexprs`` each constexpr argument to its value; a ``@triton.jit`` value (the
    learner's function) is compiled with the kernel. Raises AssertionError with the compiler's message if the code
    does not compile (a grader reports that as the learner's mistake)."""
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415

    if not isinstance(signature, dict) or not isinstance(constexprs, dict):
        raise runtime.ArgumentTypeError("signature and constexprs must be dicts of argument name -> type / value.")
    memo: dict = {}
    consts = {k: _as_compiler_fn(v, memo) for k, v in constexprs.items()}
    sig = {**signature, **{k: "constexpr" for k in constexprs}}
    src = triton.compiler.ASTSource(fn=_as_compiler_fn(kernel, memo), signature=sig, constexprs=consts)
    try:
        with _language_unpatched():
            compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                                      options={"num_warps": num_warps, "num_stages": 1})  # fmt: skip
    except Exception as exc:  # the compiler's own errors (CompilationError, RuntimeError) name the line
        if raised_not_implemented(exc):  # the exercise's stub: the grader says "not implemented yet"
            raise
        raise AssertionError(f"your code does not compile for a GPU (sm_90): {str(exc)[-1500:]}") from None
    return compiled.asm["ttir"]


@dataclass(frozen=True)
class Dot:
    """One ``tt.dot``: operand shapes ``a`` [M, K] and ``b`` [K, N], result ``out`` [M, N]; ``in_loop`` whether it
    sits inside an ``scf.for``/``scf.while`` body."""

    a: tuple
    b: tuple
    out: tuple
    in_loop: bool


@dataclass(frozen=True)
class MemOp:
    """One ``tt.load`` or ``tt.store`` of a tensor of pointers: ``kind``, ``shape``, ``masked``."""

    kind: str
    shape: tuple
    masked: bool


def _shape(text: str) -> tuple:
    m = re.search(r"tensor<([0-9x]+)x[!a-z]", text)
    return tuple(int(d) for d in m.group(1).split("x")) if m else ()


def _ir_text(ir) -> str:
    if not isinstance(ir, str):
        raise runtime.ArgumentTypeError(
            f"ir must be TTIR text (str, as method.ttir returns), got {type(ir).__name__}; compile the kernel first."
        )
    return ir


def _loop_depths(ir: str):
    """Yield (line, inside a loop) for every line of ``ir`` (regions opened by ``scf.for``/``scf.while`` count)."""
    _ir_text(ir)
    stack: list[bool] = []
    for line in ir.splitlines():
        code = line.split(" loc(")[0].rstrip()
        yield code, any(stack)
        is_loop = bool(re.search(r"\bscf\.(for|while)\b", code))
        for at, char in enumerate(code):
            if char == "{":
                stack.append(is_loop and at == len(code) - 1)
            elif char == "}" and stack:
                stack.pop()


def dots(ir: str) -> list[Dot]:
    """Every ``tt.dot`` of a TTIR text, with its shapes."""
    found = []
    for code, in_loop in _loop_depths(ir):
        if " tt.dot " not in code and not code.strip().startswith("tt.dot"):
            continue
        types_ = code.split(" : ", 1)[1] if " : " in code else ""
        parts = re.findall(r"tensor<[^>]*>", types_)
        if len(parts) >= 3:
            found.append(Dot(_shape(parts[0]), _shape(parts[1]), _shape(parts[-1]), in_loop))
    return found


def loads_and_stores(ir: str) -> list[MemOp]:
    """Every ``tt.load``/``tt.store`` of a tensor of pointers in a TTIR text (scalar ones left out), with whether it
    has a mask operand."""
    found = []
    for code, _ in _loop_depths(ir):
        m = re.search(r"\btt\.(load|store)\s+([^:]*):\s*(.*)$", code)
        if not m or "tensor<" not in m.group(3):
            continue
        operands = [o for o in m.group(2).split(",") if o.strip().startswith("%")]
        need = 1 if m.group(1) == "load" else 2
        found.append(MemOp(m.group(1), _shape(m.group(3)), len(operands) > need))
    return found


_AUTOGRAD_HINT = (
    "derive the gradients yourself: the task forbids autograd (torch.autograd.grad, .backward(), torch.func), which "
    "would hand you the answer without the algebra"
)


class OpTrace(TorchDispatchMode):
    """``with OpTrace() as trace: answer(...)`` records the aten ops the call runs (``trace.ops``, names such as
    ``"aten.mm.default"``), and what betrays autograd: ``backward_ops`` (``*_backward`` ops), ``grad_inputs`` (ops on
    a tensor that requires grad), ``functorch`` (an op under a
    ``torch.func`` transform)."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []
        self.backward_ops: list[str] = []
        self.grad_inputs = 0
        self.recorded = 0
        self.functorch = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        self.ops.append(name)
        if "backward" in name:
            self.backward_ops.append(name)
        flat = [*args, *(kwargs or {}).values()]
        if any(isinstance(a, torch.Tensor) and a.requires_grad for a in flat):
            self.grad_inputs += 1
            self.recorded += torch.is_grad_enabled()
        return func(*args, **(kwargs or {}))

    # torch.func's transforms unwrap their tensors above this mode: their entry points are watched instead.
    _NESTING = ("_grad_increment_nesting", "_jvp_increment_nesting")

    def __enter__(self):
        from torch._functorch import eager_transforms  # noqa: PLC0415

        self._saved = {n: getattr(eager_transforms, n) for n in self._NESTING if hasattr(eager_transforms, n)}

        def watched(original):
            def call(*a, **k):
                self.functorch = True
                return original(*a, **k)

            return call

        for n, original in self._saved.items():
            setattr(eager_transforms, n, watched(original))
        return super().__enter__()

    def __exit__(self, *exc):
        from torch._functorch import eager_transforms  # noqa: PLC0415

        try:
            return super().__exit__(*exc)
        finally:
            for n, original in self._saved.items():
                setattr(eager_transforms, n, original)

    def count(self, *names: str) -> int:
        """How many recorded ops are one of ``names`` (``"mm"`` matches ``aten.mm.default``)."""
        return sum(op.split(".")[1] in names for op in self.ops if op.count(".") >= 1)


def refuse_autograd(where: str, trace: OpTrace) -> None:
    """AssertionError naming how autograd was used, if ``trace`` saw it."""
    if not isinstance(trace, OpTrace):
        raise runtime.ArgumentTypeError(
            f"trace must be an OpTrace (with OpTrace() as trace: answer(...)), got {type(trace).__name__}."
        )
    if trace.backward_ops:
        raise AssertionError(
            f"{where}: your function ran {trace.backward_ops[0]} (an op of autograd's backward): {_AUTOGRAD_HINT}."
        )
    if trace.functorch:
        raise AssertionError(f"{where}: your function ran under a torch.func transform: {_AUTOGRAD_HINT}.")
    if trace.grad_inputs:
        raise AssertionError(
            f"{where}: your function ran {trace.grad_inputs} ops on tensors that require grad (autograd recorded a "
            f"graph to differentiate): {_AUTOGRAD_HINT}."
        )


@contextlib.contextmanager
def launches():
    """``with launches() as launched: answer(...)``: ``launched`` lists the Python function of every ``@triton.jit``
    kernel launched in the block (``kernel[grid](...)``, compiled or interpreted), in order."""
    from triton.runtime.jit import JITFunction  # noqa: PLC0415

    classes = [JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction  # noqa: PLC0415

        classes.append(InterpretedFunction)
    except ImportError:  # pragma: no cover - a Triton without the interpreter
        pass
    launched: list = []
    saved = [(cls, cls.__dict__["run"]) for cls in classes if "run" in cls.__dict__]

    def watched(original):
        def run(self, *args, **kwargs):
            if not kwargs.get("warmup", False):
                launched.append(getattr(self, "fn", self))
            return original(self, *args, **kwargs)

        return run

    for cls, original in saved:
        cls.run = watched(original)
    try:
        yield launched
    finally:
        for cls, original in saved:
            cls.run = original
