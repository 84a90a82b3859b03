"""Write each timed solution notebook's code cells as one Python file, for a machine without Jupyter (the GPU
device): ``python scripts/solutions_as_scripts.py OUTDIR`` writes ``OUTDIR/NN_name.py`` for every notebook of
``gpulab.course.speed.SOLUTIONS``. Run each there from ``solutions/`` (the notebooks' folder) with
``GPULAB_SPEED=1 GPULAB_SPEED_LABEL=solution GPULAB_LEADERBOARD=<file>``: the graders inside time the answers as
``python -m gpulab grade --speed`` would. Cell magics and shell lines (``%``, ``!``) are left out."""

import sys
from pathlib import Path

import nbformat

from gpulab.course import speed

ROOT = Path(__file__).resolve().parents[1]


def main(out: str) -> None:
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    for name in speed.SOLUTIONS:
        nb = nbformat.read(ROOT / "solutions" / f"{name}.ipynb", as_version=4)
        cells = [c.source for c in nb.cells if c.cell_type == "code"]
        code = "\n\n".join(
            "\n".join(line for line in cell.splitlines() if not line.lstrip().startswith(("%", "!"))) for cell in cells
        )
        (folder / f"{name}.py").write_text(code + "\n")
        print(f"wrote {folder / f'{name}.py'} ({len(cells)} code cells)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python scripts/solutions_as_scripts.py OUTDIR")
    main(sys.argv[1])
