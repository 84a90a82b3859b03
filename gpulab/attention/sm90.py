"""What every Hopper (sm_90) version of the attention kernels needs beside its kernels: the GPU's capability and SM
count (cached), the allocator for device-side TMA descriptors, and compiling a kernel for sm_90 without a GPU (the
offline structure checks of versions 2 and 3).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import torch
import triton
from triton.runtime import _allocation  # the allocator's context variable (Triton 3.6)

__all__ = ["capability", "sm_count", "ensure_allocator", "compile_for_sm90", "ttgir_in_fresh_process"]


@functools.lru_cache(maxsize=64)
def capability(index: int) -> tuple[int, int]:
    """(major, minor) compute capability of CUDA device ``index``, cached."""
    return torch.cuda.get_device_capability(index)


@functools.lru_cache(maxsize=64)
def sm_count(index: int | None) -> int:
    """Streaming multiprocessors of CUDA device ``index`` (None: the current one), cached."""
    return torch.cuda.get_device_properties(
        index if index is not None else torch.cuda.current_device()
    ).multi_processor_count


_SCRATCH: dict = {}


def _alloc(size: int, alignment: int, stream):
    """Triton's workspace for device-side descriptors (128 bytes per descriptor and program), kept per stream: kernels
    on one stream run one after another, so the next launch may reuse the buffer, and the eager path saves an
    allocation per call. During CUDA-graph capture every launch gets its own buffer from the graph's pool."""
    if torch._C._cuda_isCurrentStreamCapturing():  # what torch.cuda.is_current_stream_capturing() calls
        return torch.empty(size, dtype=torch.int8, device="cuda")
    key = (torch._C._cuda_getDevice(), stream)  # torch.cuda.current_device() without its checks
    buf = _SCRATCH.get(key)
    if buf is None or buf.numel() < size:
        buf = _SCRATCH[key] = torch.empty(max(size, 1 << 16), dtype=torch.int8, device="cuda")
    return buf


def ensure_allocator() -> None:
    """Device-side tensor descriptors need a little global memory per program (Triton asks its allocator at launch).
    Install :func:`_alloc` unless the caller's context already has an allocator (it is a context variable: a new
    thread starts without one, so this runs before every launch; it costs one lookup)."""
    if _allocation._allocator.get() is _allocation._NULL_ALLOCATOR:
        triton.set_allocator(_alloc)


def compile_for_sm90(kernel, signature: dict, constexprs: dict, pointers: int, cfg):
    """Triton's compiled ``kernel`` for sm_90 (no GPU needed, nothing launched): ``signature`` gives the types of the
    runtime arguments, its first ``pointers`` ones pointers, 16-byte aligned as the launches check; ``cfg`` gives
    ``num_warps`` and ``num_stages``."""
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415

    signature = {**signature, **{name: "constexpr" for name in constexprs}}
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(pointers)}
    src = triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages})  # fmt: skip


def ttgir_in_fresh_process(bootstrap: str, arg: str, what: str, timeout: float) -> str:
    """Run ``bootstrap`` (Python source that compiles a kernel for sm_90 and writes what it read off the compile, its
    TTGIR or a JSON summary, to stdout) with ``arg`` as ``sys.argv[1]`` in a fresh process outside the interpreter
    (without ``TRITON_INTERPRET`` and ``GPULAB_DEVICE``, which fix the mode at the first import); that output, or a
    RuntimeError naming ``what``."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "GPULAB_DEVICE")}
    done = subprocess.run([sys.executable, "-c", bootstrap, arg], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"compiling {what} for sm_90 failed:\n{done.stderr[-3000:]}")
    return done.stdout
