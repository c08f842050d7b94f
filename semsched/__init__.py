"""semsched: semantic, SLO- and cost-aware request scheduling for LLM serving.

Importing the package first decides whether the core runs compiled or from its sources
(:mod:`semsched.compiled`), before any core module is imported.
"""

from semsched.compiled import activate as _activate_compiled_core

_activate_compiled_core()
