"""What a warm parent's code is, so that a job is refused when it changed: the files the parent imported that can
change under it, the folders they sit in (a module added there is one a job may load), and each site-packages
folder (an install or removal changes it)."""

from __future__ import annotations

import os
import pkgutil
import site
import sys
import sysconfig

#: a file whose mtime is this close to the start of the parent's imports, or later, counts as changed: the kernel
#: stamps files from a clock that may lag ``time.time_ns`` by a tick, and such a file may have been saved after
#: the parent read it
MARGIN_NS = 10_000_000


def _modules_in(folder: str) -> tuple[str, ...]:
    """The modules and packages a folder offers to import, as the registry lists them (``pkgutil.iter_modules``)."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules([folder])))


def code_state(since_ns: int | None = None) -> dict[str, tuple]:
    """(mtime, size) of every module file this process imported outside the standard library and the
    site-packages folders (the package's own sources, a plugin on PYTHONPATH), the names each of their folders
    offers (key: the folder with a trailing separator), and each site-packages folder's (mtime, size).
    ``since_ns``: when the imports began; a file saved since is recorded as changed already (its code may be
    newer than what was imported)."""
    std = tuple(os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib"))
    sites = [os.path.realpath(p) for p in [*site.getsitepackages(), site.getusersitepackages()] if os.path.isdir(p)]
    installed = std + tuple(s + os.sep for s in sites)  # files that change only with an install (a site folder's mtime)
    state: dict[str, tuple] = {}
    for path in [*(getattr(m, "__file__", None) for m in list(sys.modules.values())), *sites]:
        real = os.path.realpath(path) if isinstance(path, str) else ""
        if real and (real in sites or not real.startswith(installed)):
            try:
                st = os.stat(real)
            except OSError:
                continue
            late = since_ns is not None and st.st_mtime_ns >= since_ns - MARGIN_NS
            state[real] = (-1 if late else st.st_mtime_ns, st.st_size)
            if real not in sites:
                folder = os.path.dirname(real) + os.sep
                state.setdefault(folder, _modules_in(folder))
    return state


def changed_code(state: dict[str, tuple]) -> str:
    """The first file or folder of :func:`code_state` that changed or is gone since, or ""."""
    for path, seen in state.items():
        if path.endswith(os.sep):
            if _modules_in(path) != seen:
                return path
            continue
        try:
            st = os.stat(path)
        except OSError:
            return path
        if (st.st_mtime_ns, st.st_size) != seen:
            return path
    return ""
