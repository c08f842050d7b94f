"""Regenerate the packaged length fits (``data/azure_conv_fit.json``) from the real Azure 2023 traces.

Run ``python -m semsched.workloads.fit_default`` (optionally ``--output PATH``). For each trace it stores the
quantile tables of prompt and output lengths on an even probability grid and their Spearman rank correlation
(see :class:`~semsched.workloads.lengths.QuantileLengths`), plus the trace's size and mean arrival rate for
reference. The output is deterministic: no random draws are involved.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from semsched.workloads.lengths import FIT_RESOURCE, QuantileLengths
from semsched.workloads.traces import find_data_file, load_azure_csv

TRACE_FILES = {
    "azure-conv": "azure_llm_2023_conv.csv",
    "azure-code": "azure_llm_2023_code.csv",
}
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "data" / FIT_RESOURCE
DEFAULT_NUM_POINTS = 1001


def fit_trace(file_name: str, num_points: int = DEFAULT_NUM_POINTS) -> dict[str, Any]:
    """The JSON entry for one trace file in the shared data directory."""
    workload = load_azure_csv(find_data_file(file_name))
    fit = QuantileLengths.fit(workload.prompt_tokens, workload.output_tokens, num_points=num_points)
    return {
        "source": file_name,
        "num_requests": len(workload),
        "mean_rate_per_s": round(workload.mean_rate(), 6),
        **fit.to_dict(),
    }


def build_fit_table(num_points: int = DEFAULT_NUM_POINTS) -> dict[str, Any]:
    """The whole fit file: one entry per trace in :data:`TRACE_FILES`."""
    return {
        "description": (
            "Quantile tables of prompt (ContextTokens) and output (GeneratedTokens) lengths and their "
            "Spearman rank correlation, fitted from the Azure LLM inference traces 2023 "
            "(Azure/AzurePublicDataset, CC-BY-4.0). Regenerate with: python -m semsched.workloads.fit_default"
        ),
        "fits": {name: fit_trace(file_name, num_points) for name, file_name in TRACE_FILES.items()},
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: fit every trace and write the JSON file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where to write the JSON")
    parser.add_argument("--points", type=int, default=DEFAULT_NUM_POINTS, help="quantile grid size")
    args = parser.parse_args(argv)
    table = build_fit_table(args.points)
    args.output.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.output} ({', '.join(table['fits'])})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
