"""Output helpers shared by the benchmark scripts: one table printed twice (rich, then Markdown), JSON dumps.

The scripts put this directory on ``sys.path`` implicitly (they are run as ``python benchmarks/X.py``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


@dataclass
class ResultTable:
    """A titled table of already formatted cells; numbers stay in the JSON dump, not here."""

    title: str
    columns: Sequence[str]
    rows: list[Sequence[str]] = field(default_factory=list)

    def add(self, *cells: str) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{self.title}: row has {len(cells)} cells, table has {len(self.columns)} columns")
        self.rows.append(cells)

    def to_markdown(self) -> str:
        lines = [
            "| " + " | ".join(self.columns) + " |",
            "|" + "|".join("---" if i == 0 else "---:" for i in range(len(self.columns))) + "|",
        ]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines)

    def print(self, console: Console) -> None:
        """Rich table for the terminal, then the same table as Markdown (for the README)."""
        table = Table(title=self.title)
        for i, column in enumerate(self.columns):
            table.add_column(column, justify="left" if i == 0 else "right")
        for row in self.rows:
            table.add_row(*row)
        console.print(table)
        console.print(f"\nMarkdown ({self.title}):\n", markup=False)
        console.print(self.to_markdown(), markup=False, highlight=False, soft_wrap=True)
        console.print()


def make_console() -> Console:
    """A console that does not squeeze wide tables when output is redirected to a file or a pipe."""
    return Console() if sys.stdout.isatty() else Console(width=220)


def target_line(name: str, measured: str, target: str, met: bool) -> str:
    return f"{name}: measured {measured}; target {target} -> {'MET' if met else 'NOT MET'}"


def environment() -> dict[str, str]:
    """Where the numbers were taken, for the JSON dump."""
    return {"python": sys.version.split()[0], "platform": platform.platform(), "machine": platform.machine()}


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type`` for integers >= ``minimum`` (the error names the limit and the value given)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer (got {text!r})") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum} (got {value})")
        return value

    return parse


@contextmanager
def model_dir(model: str | None) -> Iterator[str]:
    """``model``, or (when ``None``) a tiny random-weight model written to a temporary directory for the block."""
    if model is not None:
        yield model
        return
    from semsched.calibrate.tiny_model import make_tiny_model

    with tempfile.TemporaryDirectory(prefix="semsched-bench-model-") as scratch:
        yield str(make_tiny_model(Path(scratch) / "model"))


def dump_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"environment": environment(), **payload}, indent=2) + "\n")
