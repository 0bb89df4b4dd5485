"""Bar charts of benchmark results; run with the peers' Python (it has matplotlib).

    python charts.py OUT_DIR RESULTS.json [...]

Writes OUT_DIR/<scenario>.png for each results file and prints the paths.
"""

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

COLORS = {"project": "#d62728", "peer": "#1f77b4", "ceiling": "#7f7f7f"}


def _thousands(value, _pos):
    return f"{value / 1000:g}k" if value else "0"


def chart(data, out_dir):
    rows = [s for s in data["summary"] if s["status"] == "ok"]
    if not rows:
        return None
    roles = data.get("roles", {})
    names = [s["server"] for s in rows]
    colors = [COLORS.get(roles.get(n, "peer"), COLORS["peer"]) for n in names]
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.45 * len(rows) + 1.6))
    panels = [("rps", "requests / s"), ("req_per_cpu_s", "requests / CPU-second")]
    for ax, (key, label) in zip(axes, panels, strict=True):
        values = [s.get(key) or 0 for s in rows]
        bars = ax.barh(names, values, color=colors)
        ax.invert_yaxis()
        ax.set_xlabel(label)
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], padding=3, fontsize=8)
        ax.set_xlim(0, max(values) * 1.25 if max(values) else 1)
        ax.xaxis.set_major_formatter(FuncFormatter(_thousands))
        ax.grid(axis="x", alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    mode = "" if data["mode"] == "full" else " (quick smoke run)"
    fig.suptitle(f"{data['scenario']}: median of {data['params']['rounds']} round(s){mode}")
    fig.tight_layout()
    path = os.path.join(out_dir, f"{data['scenario']}.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for results in sys.argv[2:]:
        with open(results) as f:
            path = chart(json.load(f), out_dir)
        if path:
            print(path)


if __name__ == "__main__":
    main()
