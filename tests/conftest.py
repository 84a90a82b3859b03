import os

import pytest
import torch

os.environ.setdefault("GPULAB_POISON", "1")  # one poison policy: outputs NaN-filled in tests, also on the GPU

import gpulab  # noqa: F401 - decides interpreter vs CUDA before any test defines a kernel

if os.environ.get("PYTEST_XDIST_WORKER") and not torch.cuda.is_available():
    torch.set_num_threads(1)  # `make test` runs one pytest-xdist worker per core: one thread each


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (the full-size self-test, `pytest -m gpu`, runs on one)")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


# The course tools need Jupyter's packages; a bare GPU machine running `pytest -m gpu` may not have them.
collect_ignore = []
try:
    import nbformat  # noqa: F401
except ImportError:
    collect_ignore += ["test_course.py", "test_repository.py", "course"]

# Property-based tests (hypothesis, in the test extra): bounded, no deadline (the interpreter and 2 shared cores make
# timings noisy), and derandomized in CI so a run there is reproducible. HYPOTHESIS_PROFILE=dev explores new examples.
try:
    from hypothesis import settings
except ImportError:
    collect_ignore += ["test_validation_properties.py", "bench/test_bench_flops.py"]
else:
    settings.register_profile("ci", max_examples=50, deadline=None, derandomize=True, print_blob=True)
    settings.register_profile("dev", max_examples=50, deadline=None)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
