"""A deployment's tier table in YAML: read (:func:`load_tier_table`) and written (:func:`tier_table_yaml`).

The table's model and every check live in :mod:`semsched.core.tiers`; this module only turns files into
documents and back (the core stays free of file formats). ``tiered:tier_table=PATH`` reads one; so do
``semsched tiers`` and ``semsched simulate --tiers``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from semsched.core.tiers import TierError, TierSpec, tier_table_document, tier_table_from_mapping


def load_tier_table(path: str | Path) -> tuple[TierSpec, ...]:
    """The tiers of the YAML tier table at ``path`` (see :func:`semsched.core.tiers.tier_table_from_mapping`),
    ordered by priority. Raises :class:`TierError` naming the file, and the field where one is at fault."""
    source = Path(path)
    try:
        document = yaml.safe_load(source.read_text(encoding="utf-8"))
    except OSError as error:
        raise TierError(f"tier table {source}: cannot read it ({error.strerror or error})") from error
    except yaml.YAMLError as error:
        raise TierError(f"tier table {source}: not valid YAML ({error})") from error
    try:
        return tier_table_from_mapping(document)
    except TierError as error:
        raise TierError(f"tier table {source}: {error}") from error


def tier_table_yaml(tiers: Sequence[TierSpec]) -> str:
    """``tiers`` as a YAML tier table that :func:`load_tier_table` reads back to the same specs."""
    return yaml.safe_dump(tier_table_document(tiers), sort_keys=False)
