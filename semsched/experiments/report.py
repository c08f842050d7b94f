"""Writing an experiment's report: ``report.md``, ``results.json``, one PNG per figure and ``requests.csv``
(../shared/EXPERIMENTS.md), and copying a full run's report into ``docs/reproductions/``."""

from __future__ import annotations

import csv
import datetime
import json
import math
import os
import platform
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from semsched.experiments.curves import Claim
from semsched.experiments.framework import REPORT_MARKER, ExperimentContext, Figure, Table
from semsched.experiments.registry import Experiment, ExperimentError
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
        "grid_note": ctx.grid_note,
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
    claims = [
        {"claim": c.claim, "paper": c.paper, "ours": c.ours, "where": c.where, "verdict": c.verdict, "why": c.why,
         "figure": c.figure}
        for c in ctx.claims
    ]
    return {"meta": _json_safe(meta), "claims": claims, "figures": figures}


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
        f"- grid: {'quick (reduced: fewer rates, shorter runs, fewer seeds)' if ctx.quick else 'full'}"
        f"{f' (cut: {ctx.grid_note})' if ctx.grid_note and not ctx.quick else ''}; seed {ctx.seed}",
        "- files: `results.json` (these numbers), `requests.csv` (every request of every run, with the figure "
        "id), one PNG per figure",
        "",
    ]
    if ctx.claims:
        lines += ["## Claims", "", *claims_table(ctx.claims), "", "## Figures", ""]
        lines += [f"- [{fig.id}](#{fig.id}): {fig.title}" + (" (beyond the paper)" if fig.beyond_paper else "")
                  for fig in ctx.figures] + [""]
    else:
        lines += ["## Paper vs ours", "", *_overview(ctx.figures), ""]
    reproduced = [fig for fig in ctx.figures if not fig.beyond_paper]
    beyond = [fig for fig in ctx.figures if fig.beyond_paper]
    for fig in reproduced:
        lines += _section(fig, level="##")
    if beyond:
        lines += ["## Beyond the paper", ""]
        for fig in beyond:
            lines += _section(fig, level="###")
    return "\n".join(lines).rstrip() + "\n"


#: the most characters a committed record may hold (../shared/EXPERIMENTS.md); the rest lives in results.json
MAX_RECORD_CHARS = 20_000
#: the most numbers one table cell of a record may hold
MAX_NUMBERS_PER_CELL = 3
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?")


def claims_table(claims: Sequence[Claim]) -> list[str]:
    """The table a record opens with: one row per claim of the paper."""
    rows = tuple(
        (c.claim + (f" ([{c.figure}](#{c.figure}))" if c.figure else ""), c.paper, c.ours, c.where or "—",
         f"**{c.verdict}**: {c.why}")
        for c in claims
    )
    return markdown_table(Table(("claim", "paper", "ours: median [min-max]", "where", "verdict"), rows))


def numbers_in(cell: str) -> int:
    """How many numbers a table cell holds (a link to a figure and a name that starts with a letter, such as
    ``a100-qwen1.5-7b`` or ``p99``, do not count)."""
    cell = re.sub(r"\[[^\]]*\]\(#[^)]*\)", "", cell)  # a link to a figure
    cell = re.sub(r"(?<![\w.])[A-Za-z_][\w.\-]*", " ", cell)  # a name (a100-qwen1.5-7b, p99): not a number
    return len(_NUMBER.findall(cell))


def record_problems(text: str) -> list[str]:
    """What keeps a record from being readable: over :data:`MAX_RECORD_CHARS`, or a table cell with more than
    :data:`MAX_NUMBERS_PER_CELL` numbers (each named)."""
    problems = []
    if len(text) > MAX_RECORD_CHARS:
        problems.append(f"{len(text):,} characters (at most {MAX_RECORD_CHARS:,}; move detail to results.json)")
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        for cell in line.strip().strip("|").split("|"):
            if numbers_in(cell) > MAX_NUMBERS_PER_CELL:
                problems.append(f"line {number}: a cell holds {numbers_in(cell)} numbers: {cell.strip()[:80]!r}")
    return problems


def record(report_dir: Path, docs_dir: Path, name: str) -> Path:
    """Copy a full run's report into ``docs_dir/NAME.md`` with its PNGs under ``docs_dir/img/`` (as
    ``NAME_<id>.png``), the committed record of ../shared/EXPERIMENTS.md.

    Refuses (:class:`~semsched.experiments.registry.ExperimentError`, nothing written) a report that is not a
    readable record: no claim table (when it reproduces a paper: semsched's own demo has no claims), over
    :data:`MAX_RECORD_CHARS` characters as written (image paths included), or a cell with more than
    :data:`MAX_NUMBERS_PER_CELL` numbers."""
    text = (report_dir / "report.md").read_text()
    pngs = sorted(report_dir.glob("*.png"))
    for png in pngs:  # the record's text as written, image paths included, is what the limits apply to
        text = text.replace(f"]({png.name})", f"](img/{name}_{png.name})")
    results = report_dir / REPORT_MARKER
    reproduces = not results.is_file() or bool(json.loads(results.read_text()).get("meta", {}).get("source"))
    problems = [] if "\n## Claims\n" in text or not reproduces else ["no claim table (the experiment adds none)"]
    problems += record_problems(text)
    if problems:
        shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
        raise ExperimentError(f"{report_dir / 'report.md'} is not a readable record: {shown}")
    images = docs_dir / "img"
    images.mkdir(parents=True, exist_ok=True)
    for png in pngs:
        shutil.copyfile(png, images / f"{name}_{png.name}")
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
        rows.append((f"[{fig.id}](#{fig.id})", fig.title, paper, fig.headline or "—"))
    columns = ("figure", "what", "paper", "ours (headline; ratios in its section)")
    return markdown_table(Table(columns, tuple(rows)))


def _section(fig: Figure, *, level: str) -> list[str]:
    lines = [
        f'{level} {fig.id}: {fig.title} <a id="{fig.id}"></a>',
        "",
        f"**What the paper measured.** {fig.paper_says}",
        "",
    ]
    lines += ["**How we ran it.**", "", "```", fig.command, "```", ""]
    lines += [f"Its configuration (workload, rates, seeds, profile, policies with parameters) is "
              f"`results.json` → figure `{fig.id}` → `config`.", ""]
    lines += ["**Our result.**", ""]
    if fig.headline:
        lines += [f"Headline: {fig.headline}.", ""]
    lines += [*markdown_table(fig.table), "", f"![{fig.id}]({fig.id}.png)", ""]
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
