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


# (row key, its value, panel title, axis label) of the memory scenarios' panels.
MEMORY_PANELS = {
    "idle": [
        ("phase", "idle", "10,000 idle keep-alive connections", "KiB per connection"),
        ("phase", "head", "1,000 incomplete 60 KiB heads", "KiB per connection"),
    ],
    "streams": [
        ("transfer", "file", "1 GiB download, zero-copy", "MiB/s"),
        ("transfer", "gen", "1 GiB download from the app", "MiB/s"),
        ("transfer", "upload", "1 GiB upload", "MiB/s"),
    ],
}


def memory_chart(data, out_dir):
    """One panel per phase (idle: KiB per connection) or transfer (streams: MiB/s)."""
    kind = data["kind"]
    value = "per_conn_kib" if kind == "idle" else "mib_s"
    panels = []
    for key, which, title, label in MEMORY_PANELS[kind]:
        rows = [
            s
            for s in data["summary"]
            if s.get(key) == which and s["status"] == "ok" and s.get(value) is not None
        ]
        if rows:
            panels.append((title, label, rows))
    if not panels:
        return None
    roles = data.get("roles", {})
    height = 0.45 * max(len(rows) for _, _, rows in panels) + 1.6
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), height), squeeze=False)
    for ax, (title, label, rows) in zip(axes[0], panels, strict=True):
        names = [s["server"] for s in rows]
        values = [s[value] for s in rows]
        colors = [COLORS.get(roles.get(n, "peer"), COLORS["peer"]) for n in names]
        bars = ax.barh(names, values, color=colors)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(label)
        fmt = "{:.2f}" if kind == "idle" else "{:,.0f}"
        ax.bar_label(bars, labels=[fmt.format(v) for v in values], padding=3, fontsize=8)
        ax.set_xlim(0, max(values) * 1.3 if max(values) else 1)
        ax.grid(axis="x", alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    mode = "" if data["mode"] == "full" else " (quick smoke run)"
    fig.suptitle(f"{data['scenario']}: median of {data['params']['rounds']} round(s){mode}")
    fig.tight_layout()
    path = os.path.join(out_dir, f"{data['scenario']}.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def chart(data, out_dir):
    if data.get("kind", "load") not in ("load", *MEMORY_PANELS):
        return None  # instructions: a table is enough
    if data.get("kind", "load") != "load":
        return memory_chart(data, out_dir)
    rows = [s for s in data["summary"] if s["status"] == "ok"]
    if not rows:
        return None
    roles = data.get("roles", {})
    names = [s["server"] for s in rows]
    colors = [COLORS.get(roles.get(n, "peer"), COLORS["peer"]) for n in names]
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.45 * len(rows) + 1.6))
    what = "messages" if data["params"].get("load") == "wsload" else "requests"
    panels = [("rps", f"{what} / s"), ("req_per_cpu_s", f"{what} / CPU-second")]
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
