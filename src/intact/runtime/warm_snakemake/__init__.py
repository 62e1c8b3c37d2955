"""Snakemake's command line started from a warm parent that has imported Snakemake and the ``intact`` modules
the Snakefile imports: ``python -m intact.runtime.warm_snakemake ARGS`` is ``python -m snakemake ARGS``.

Where :data:`ENV_SOCKET` names such a parent (:func:`start`), the command runs in a fresh child of it (the
same :func:`intact.runtime.warm.hand_off` that job scripts use: its own process group, the caller's argv, working
directory, environment and standard streams; signals relayed, the same exit status); else it runs as
``python -m snakemake`` would. The test suite runs its ~60 small workflow runs this way
(:func:`intact.testing.snakemake`): importing Snakemake with its executor plugins (the SLURM one imports
pandas) and the Snakefile's modules is ~0.9 s of a tiny dry run's ~1.7 s (docs/log/2026-11-27-test-suite-cpu.md).
Nothing here is on a user's path: ``snakemake`` itself starts as always.

This folder holds no module a script could shadow: a warm child puts the script's folder first on sys.path.
"""

from __future__ import annotations

import re
from pathlib import Path

from intact.runtime import warm

#: the socket of the warm parent that preloads Snakemake (a test session's; set per test module)
ENV_SOCKET = "INTACT_SNAKEMAKE_SOCKET"
#: Snakemake's command line, with the executor plugins it collects at start-up
SNAKEMAKE_MODULES = ("snakemake.cli", "snakemake.api")
_IMPORT = re.compile(r"^(?:from|import) (intact(?:\.\w+)*)", re.M)


def preload_modules(root: str | Path) -> list[str]:
    """What the parent imports for the checkout at ``root``: Snakemake's command line and every ``intact``
    module that the Snakefile and its rule files import at top level (read from them: no list kept)."""
    files = [Path(root) / "Snakefile", *sorted((Path(root) / "workflow" / "rules").glob("*.smk"))]
    names = {m for f in files for m in _IMPORT.findall(f.read_text())}
    return [*SNAKEMAKE_MODULES, *sorted(names)]


def start(root: str | Path) -> warm.WarmParent | None:
    """A warm parent for ``python -m intact.runtime.warm_snakemake`` in the checkout at ``root`` (not exported: the
    caller hands its socket to the commands through :data:`ENV_SOCKET`); None where none starts."""
    return warm.start(preload_modules(root), export=False)
