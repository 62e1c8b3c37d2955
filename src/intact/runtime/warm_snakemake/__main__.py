"""``python -m intact.runtime.warm_snakemake ARGS``: ``python -m snakemake ARGS``, in a child of the warm parent that
:data:`intact.runtime.warm_snakemake.ENV_SOCKET` names, if one serves (see the package docstring)."""

import os

from intact.runtime.warm import hand_off
from intact.runtime.warm_snakemake import ENV_SOCKET

if os.environ.get(ENV_SOCKET):
    hand_off(os.environ[ENV_SOCKET])
    os.environ.pop(ENV_SOCKET, None)  # here (warm or cold) the run's jobs must not see it

from snakemake.cli import main  # noqa: E402  (after the hand-off: a warm child has it imported already)

main()
