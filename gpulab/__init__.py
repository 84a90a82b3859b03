"""gpulab: the companion package of a course on GPU-aware sequence models.

Importing gpulab first decides where kernels run (:mod:`gpulab.runtime`): on a CUDA GPU, or in Triton's CPU
interpreter when there is none. Import gpulab before defining your own ``@triton.jit`` kernels. Importing it also
registers ``"gpulab"`` as an implementation of SDPA's flash backend, not activated:
``torch.nn.attention.activate_flash_attention_impl("gpulab")`` routes SDPA's flash calls to gpulab's kernels.
"""

from gpulab import runtime  # noqa: I001 - must come first: sets TRITON_INTERPRET before any kernel is defined
from gpulab import bench, check, hardware, lessons
from gpulab import attention  # registers "gpulab" as SDPA's flash implementation, not active (attention.sdpa)

__version__ = "0.1.0"  # the one version: pyproject.toml reads it (setuptools dynamic version)
__all__ = ["runtime", "attention", "bench", "check", "hardware", "lessons", "__version__"]
