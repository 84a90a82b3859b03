"""The probes' one output: ``emitter(name)`` opens ``$OUT/<name>.jsonl`` (``out/`` without ``$OUT``) and returns
``emit(**fields)``, which writes one JSON line, flushes it (a probe killed at its time limit keeps what it wrote) and
prints it. Used by ``probe_lstm_large.py`` and ``probe_v3_backward.py`` (run as ``python scripts/NAME.py``, so this
folder is on the import path)."""

import json
import os


def emitter(name: str):
    folder = os.environ.get("OUT", "out")
    os.makedirs(folder, exist_ok=True)
    f = open(os.path.join(folder, f"{name}.jsonl"), "w")

    def emit(**fields):
        f.write(json.dumps(fields) + "\n")
        f.flush()
        print(fields, flush=True)

    return emit
