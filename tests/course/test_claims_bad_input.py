"""Bad input to the claims, listings, one-record and HBM-ceiling helpers (issue 36): each raises naming the argument."""

import pytest

from gpulab.bench import history
from gpulab.course import claims, listing, prose, shown
from gpulab.roofline import hbm

KEY = history.Key("05", "case", "v", "H100", "B16", "device")

CASES = [
    ("Key-clock", lambda: history.Key("05", "case", "v", "H100", "B16", "ms"), ValueError, "clock"),
    ("Key-empty", lambda: history.Key("05", "", "v", "H100", "B16", "wall"), TypeError, "Key.case"),
    ("Shown-key", lambda: history.Shown(("05",), "run", 1.0), TypeError, "Shown.key"),
    ("Shown-value", lambda: history.Shown(KEY, "run", "6.7"), TypeError, "Shown.value"),
    ("Shown-history", lambda: history.Shown(KEY, "run", 6.7, history="yes"), TypeError, "Shown.history"),
    ("conflicts-item", lambda: history.conflicts([1]), TypeError, "Shown"),
    ("check-item", lambda: history.check(["x"]), TypeError, "Shown"),
    ("Claim-text", lambda: claims.Claim(3), TypeError, "Claim.text"),
    ("claim-template", lambda: claims.claim(None, holds=True), TypeError, "template"),
    ("claim-values", lambda: claims.claim("{n} wins", holds=True), TypeError, "not among values"),
    ("claim-false", lambda: claims.claim("A beats B", holds=False), claims.ClaimError, "predicate is false"),
    ("paragraph-empty", lambda: claims.paragraph(), ValueError, "at least one"),
    ("paragraph-part", lambda: claims.paragraph(3), TypeError, "Claim or str"),
    ("show-part", lambda: claims.show(None), TypeError, "Claim or str"),
    ("comparisons-type", lambda: claims.comparisons(b"faster"), TypeError, "markdown must be a str"),
    ("bypasses-type", lambda: claims.bypasses(3), TypeError, "path must be"),
    ("bypasses-missing", lambda: claims.bypasses("notebooks/src/99_none.py"), ValueError, "existing jupytext"),
    ("listing-show-fn", lambda: listing.show(3), TypeError, "fn must be"),
    ("listing-show-lines", lambda: listing.show(len, max_lines=0), ValueError, "max_lines"),
    ("listing-diff-fn", lambda: listing.diff(len, "x"), TypeError, "fn must be"),
    ("listing-source_lines", lambda: listing.source_lines(None), TypeError, "fn must be"),
    ("machine_digits-path", lambda: prose.machine_digits("notebooks/none.ipynb"), ValueError, "executed notebook"),
    ("versions_now-rows", lambda: shown.versions_now("rows"), TypeError, "rows"),
    ("split_now-rows", lambda: shown.split_now({"kind": "time"}), TypeError, "load_split"),
    ("partials_now-rows", lambda: shown.partials_now(None), TypeError, "load_split"),
    ("run_training-rows", lambda: shown.run_training([], "fused"), ValueError, "rows"),
    ("unmeasured-rows", lambda: shown.unmeasured([1]), TypeError, "rows"),
    ("history_line-key", lambda: shown.history_line("split", "fwd", [], str), ValueError, "record, what"),
    ("history_line-describe", lambda: shown.history_line("split", "fwd+bwd", [], None), TypeError, "describe"),
    ("lesson06-gpu", lambda: shown.lesson06(gpu=3), TypeError, "gpu"),
    ("attention_versions-records", lambda: shown.attention_versions("x"), TypeError, "records"),
    ("HBMCeiling-gbps", lambda: hbm.HBMCeiling(0, 3350, "how", "src"), ValueError, "HBMCeiling.gbps"),
    ("hbm_ceiling-gpu", lambda: hbm.hbm_ceiling(gpu=3.5), TypeError, "gpu"),
    ("read_plateau-empty", lambda: hbm.read_plateau([]), ValueError, "past 4x L2"),
]


@pytest.mark.parametrize("call, error, match", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_naming_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()
