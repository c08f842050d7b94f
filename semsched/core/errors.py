"""The one base class of semsched's user-facing errors.

Every error that reports bad input (a request field, a policy or workload spec, a profile, a tier table, a trace
file, an option) derives from :class:`SemschedError`, with a message that names the field and the limit. The CLI
catches exactly this class and prints one ``error:`` line; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class SemschedError(ValueError):
    """Bad input to semsched: the message names the field (or option) and the limit it broke."""
