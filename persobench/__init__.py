"""PersoBench: benchmarking personalized response generation in LLMs.

The top-level import is deliberately light; heavy dependencies load only inside the stage that
needs them.
"""

__version__ = "0.1.0"

from persobench.records import PersonaSet, Sample, Turn  # noqa: E402

__all__ = ["PersonaSet", "Sample", "Turn", "__version__"]
