"""Data analysis the way an agent does it: write a CSV, load it, describe it, plot it.

Each step is a piece of code an agent would send to the tool, and what it prints is the observation
the model would read. Figures come back as PNG attachments; the plot is saved to
genpark-repl-examples/data_analysis.png in the system's temporary directory (the path is printed),
or to the path given as the first argument. Offline: no model, no network.
Needs pandas and matplotlib (`python3 scripts/dev.py test` installs them into .venv).

Run it with:  .venv/bin/python examples/data_analysis.py
"""

from __future__ import annotations

import base64
import sys
import tempfile
from pathlib import Path

from genpark_repl_tools import ExecutionResult, Limits, ReplEngine

# Outside the current directory: run from a clone, the example must not leave an untracked file in it.
IMAGE = Path(tempfile.gettempdir()) / "genpark-repl-examples" / "data_analysis.png"

WRITE_CSV = """
rows = [
    ("2024-01", "North", 120.5), ("2024-01", "South", 98.0),
    ("2024-02", "North", 132.0), ("2024-02", "South", 101.5),
    ("2024-03", "North", 128.5), ("2024-03", "South", 117.0),
    ("2024-04", "North", 141.0), ("2024-04", "South", 122.5),
    ("2024-05", "North", 150.5), ("2024-05", "South", 119.0),
    ("2024-06", "North", 163.0), ("2024-06", "South", 131.5),
]
with open({path!r}, "w", encoding="utf-8") as f:
    f.write("month,region,revenue\\n")
    f.writelines(f"{{m}},{{r}},{{v}}\\n" for m, r, v in rows)
print("wrote", len(rows), "rows")
"""

LOAD = """
import pandas as pd
sales = pd.read_csv({path!r}, parse_dates=["month"])
sales
"""

DESCRIBE = """
sales.groupby("region")["revenue"].agg(["count", "mean", "min", "max"]).round(1)
"""

PLOT = """
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(7, 4))
for region, rows in sales.groupby("region"):
    ax.plot(rows["month"], rows["revenue"], marker="o", label=region)
ax.set_title("Monthly revenue by region")
ax.set_ylabel("revenue (k EUR)")
ax.grid(alpha=0.3)
ax.legend()
fig.autofmt_xdate()
plt.show()
"""


def step(engine: ReplEngine, title: str, code: str) -> ExecutionResult:
    print(f"\n=== agent: {title}")
    print(code.strip())
    result = engine.run(code, session="analyst")
    print("--- observation")
    print(result.to_observation())
    if result.status != "ok":
        raise SystemExit(f"step {title!r} failed: {result.status}")
    return result


def main(image: Path = IMAGE) -> None:
    # The default boundary (a sandboxed worker process per session on Linux) gives the session a
    # workspace of its own as its working directory: the CSV is written there, by a relative path,
    # and goes with the engine. The default preset allows the data stack; files only in the workspace.
    with ReplEngine(limits=Limits(timeout_s=60)) as engine:
        step(engine, "write a small CSV", WRITE_CSV.format(path="sales.csv"))
        step(engine, "load it", LOAD.format(path="sales.csv"))
        step(engine, "describe it", DESCRIBE)
        plotted = step(engine, "plot it", PLOT)
    if not plotted.attachments:
        raise SystemExit("the plot step returned no image")
    image.parent.mkdir(parents=True, exist_ok=True)
    image.write_bytes(base64.b64decode(plotted.attachments[0].data_base64))
    print(f"\nsaved {plotted.attachments[0].description} to {image}")


if __name__ == "__main__":
    # Optional argument: where to save the plot (default: IMAGE, in the temporary directory).
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else IMAGE)
