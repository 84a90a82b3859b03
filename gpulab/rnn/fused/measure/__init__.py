"""Lesson 6's measuring code: the benchmarks behind ``python -m gpulab bench 06 [part]`` (:mod:`.benchmark`,
:mod:`.split_bench`, :mod:`.steps_bench`, :mod:`.versions_bench`, :mod:`.called_bench`), the readers of their records
(:mod:`.split_report`, :mod:`.rows_report`, :mod:`.versions_report`) and the compiled kernels' SASS counted without a
GPU (:mod:`.sass`). They import the package's API; the package's path never imports them."""
