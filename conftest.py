"""Time budgets for notebooks run under nbval (`pytest --nbval notebooks/ solutions/`).

A lesson notebook may spend at most 45 s executing its cells on CPU, a solution notebook 20 s. pytest-timeout
stops a single runaway cell at the budget; the cumulative check below fails the first cell that takes its
notebook over budget, naming the notebook and the time spent. Kernel start-up is not counted.
"""

import pytest

NOTEBOOK_BUDGET_S = {"notebooks": 45.0, "solutions": 20.0, "exercises": 20.0}
_spent: dict[str, float] = {}


def _budget(item):
    path = getattr(item, "path", None)
    if path is None or path.suffix != ".ipynb":
        return None, None
    return str(path), NOTEBOOK_BUDGET_S.get(path.parent.name)


def pytest_collection_modifyitems(config, items):
    for item in items:
        _, budget = _budget(item)
        if budget is not None:
            item.add_marker(pytest.mark.timeout(budget))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    path, budget = _budget(item)
    if budget is None or report.when != "call":
        return
    _spent[path] = _spent.get(path, 0.0) + report.duration
    if _spent[path] > budget and report.passed:
        report.outcome = "failed"
        report.longrepr = (
            f"{path}: its cells have taken {_spent[path]:.1f} s so far, over the {budget:g} s CPU budget for "
            f"notebooks in {item.path.parent.name}/. Use smaller CPU sizes (gpulab.runtime.pick) in the slow cells."
        )
