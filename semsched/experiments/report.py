"""Writing an experiment's report: ``report.md``, ``results.json``, one PNG per figure and ``requests.csv``
(../shared/EXPERIMENTS.md), and copying a full run's report into ``docs/reproductions/``."""

from __future__ import annotations

import csv
import datetime
import json
import math
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from semsched.experiments.framework import ExperimentContext, Figure, Table
from semsched.experiments.registry import Experiment
from semsched.metrics import request_metrics, write_requests_csv


def write_report(ctx: ExperimentContext, experiment: Experiment, out: Path, *, command: str) -> None:
    """Every file of the report into the (existing, empty) directory ``out``."""
    meta = run_meta(ctx, experiment, command)
    for figure in ctx.figures:
        figure.plot(out / f"{figure.id}.png")
    (out / "results.json").write_text(json.dumps(results_document(ctx, meta), indent=2, allow_nan=False) + "\n")
    write_all_requests(out / "requests.csv", ctx)
    (out / "report.md").write_text(report_markdown(ctx, experiment, meta))


def run_meta(ctx: ExperimentContext, experiment: Experiment, command: str) -> dict[str, Any]:
    """What a reader needs to rerun the report and judge where it ran."""
    return {
        "experiment": ctx.name,
        "summary": experiment.summary,
        "source": experiment.source,
        "command": command or f"semsched reproduce {ctx.name}{' --quick' if ctx.quick else ''} --seed {ctx.seed}",
        "quick": ctx.quick,
        "seed": ctx.seed,
        "commit": _commit(),
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}",
    }


def results_document(ctx: ExperimentContext, meta: Mapping[str, Any]) -> dict[str, Any]:
    figures = [
        {
            "id": fig.id,
            "title": fig.title,
            "paper": _json_safe(fig.paper),
            "ours": _json_safe(fig.ours),
            "config": _json_safe(fig.config),
            "command": fig.command,
            "ratios": _json_safe(fig.ratios),
            "ratio_direction": fig.ratio_direction,
            "beyond_paper": fig.beyond_paper,
        }
        for fig in ctx.figures
    ]
    return {"meta": _json_safe(meta), "figures": figures}


def write_all_requests(path: Path, ctx: ExperimentContext) -> None:
    """One row per request of every run: the figure, the run's own columns, then semsched's request columns."""
    extra = list(dict.fromkeys(key for run in ctx.runs for key in run.columns))
    rows: list[dict[str, Any]] = []
    columns: list[str] = []
    with tempfile.TemporaryDirectory(prefix="semsched-requests-") as scratch:
        part = Path(scratch) / "run.csv"
        for run in ctx.runs:
            write_requests_csv(part, [request_metrics(r) for r in run.requests], run.policy)
            with part.open(newline="", encoding="utf-8") as handle:
                reader = csv.DictReader(handle)
                columns = columns or list(reader.fieldnames or [])
                for row in reader:
                    rows.append({"figure": run.figure_id, **{k: run.columns.get(k, "") for k in extra}, **row})
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["figure", *extra, *columns])
        writer.writeheader()
        writer.writerows(rows)


def report_markdown(ctx: ExperimentContext, experiment: Experiment, meta: Mapping[str, Any]) -> str:
    lines = [f"# `semsched reproduce {ctx.name}`: {experiment.summary}", ""]
    if experiment.source:
        lines += [f"Reproduces `{experiment.source}`.", ""]
    lines += [
        f"- command: `{meta['command']}`",
        f"- commit: `{meta['commit']}`; date (UTC): {meta['date_utc']}; machine: {meta['machine']}",
        f"- grid: {'quick (reduced: fewer rates, shorter runs, fewer seeds)' if ctx.quick else 'full'}; "
        f"seed {ctx.seed}",
        "- files: `results.json` (these numbers), `requests.csv` (every request of every run, with the figure "
        "id), one PNG per figure",
        "",
        "## Paper vs ours",
        "",
        *_overview(ctx.figures),
        "",
    ]
    reproduced = [fig for fig in ctx.figures if not fig.beyond_paper]
    beyond = [fig for fig in ctx.figures if fig.beyond_paper]
    for fig in reproduced:
        lines += _section(fig, level="##")
    if beyond:
        lines += ["## Beyond the paper", ""]
        for fig in beyond:
            lines += _section(fig, level="###")
    return "\n".join(lines).rstrip() + "\n"


def record(report_dir: Path, docs_dir: Path, name: str) -> Path:
    """Copy a full run's report into ``docs_dir/NAME.md`` with its PNGs under ``docs_dir/img/`` (as
    ``NAME_<id>.png``), the committed record of ../shared/EXPERIMENTS.md."""
    text = (report_dir / "report.md").read_text()
    images = docs_dir / "img"
    images.mkdir(parents=True, exist_ok=True)
    for png in sorted(report_dir.glob("*.png")):
        shutil.copyfile(png, images / f"{name}_{png.name}")
        text = text.replace(f"]({png.name})", f"](img/{name}_{png.name})")
    target = docs_dir / f"{name}.md"
    target.write_text(text)
    return target


def markdown_table(table: Table) -> list[str]:
    return [
        "| " + " | ".join(table.columns) + " |",
        "|" + "|".join("---" for _ in table.columns) + "|",
        *("| " + " | ".join(row) + " |" for row in table.rows),
    ]


def _overview(figures: Iterable[Figure]) -> list[str]:
    rows = []
    for fig in figures:
        paper = "; ".join(f"{k} {_fmt(v)}" for k, v in fig.paper.items()) or "— (no number in the source)"
        ratios = "; ".join(f"{k}: {_fmt(v)}" for k, v in fig.ratios.items()) or "—"
        rows.append((f"[{fig.id}](#{fig.id})", fig.title, paper, fig.headline or "—", ratios))
    return markdown_table(Table(("figure", "what", "paper", "ours (headline)", "ratios"), tuple(rows)))


def _section(fig: Figure, *, level: str) -> list[str]:
    lines = [
        f'{level} {fig.id}: {fig.title} <a id="{fig.id}"></a>',
        "",
        f"**What the paper measured.** {fig.paper_says}",
        "",
    ]
    lines += ["**How we ran it.**", "", "```", fig.command, "```", ""]
    lines += ["```json", json.dumps(_json_safe(fig.config), indent=2), "```", ""]
    lines += ["**Our result.**", "", *markdown_table(fig.table), "", f"![{fig.id}]({fig.id}.png)", ""]
    if fig.ratios:
        lines += [f"**Ratios ({fig.ratio_direction}).**", ""]
        lines += [f"- {name}: {_fmt(value)}" for name, value in fig.ratios.items()] + [""]
    if fig.notes:
        lines += ["**Differences and why.**", ""] + [f"- {note}" for note in fig.notes] + [""]
    return lines


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _json_safe(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    if hasattr(value, "item"):  # numpy scalars
        return _json_safe(value.item())
    return str(value)


def _commit() -> str:
    """The checkout's commit (with ``-dirty`` when it has uncommitted changes), or ``unknown``."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}-dirty" if dirty else head
