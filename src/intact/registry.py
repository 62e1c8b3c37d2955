"""Registries of declarations: the built-in modules of one package and the entry points of one group.

One importer of ``"module:attr"`` targets (:func:`import_target`), one resolver of names (:func:`resolve`) and one
way to find declarations (:class:`Registry`), shared by the methods (:mod:`intact.methods`) and whatever else
is declared in files and registered by other packages (benchmarks).

A plugin (an entry point) is imported only when a config names it (its name is looked up): listing, validating and
name clashes use the entry points' names (:mod:`intact.plugins`). One that takes a built-in's name is refused in one
line on stderr (:attr:`Registry.refused`); the built-in stays. A declaration that cannot be loaded - a module that
fails to import, an entry point that names the wrong object or declares another name, a name declared twice - does
not stop the import: the failure is recorded under the name it would have had, and only looking that name up raises,
with one line naming the distribution, the entry point or module, and the cause. So a broken plugin refuses only the
configs that use it. Any exception its import raises counts, ``SystemExit`` (``sys.exit()``, ``argparse`` at import)
and a ``KeyboardInterrupt`` the plugin raises itself included: only a real Ctrl-C (a SIGINT that arrives while
loading, seen by a handler installed for the time of each import: :func:`_loading`) still stops the process. What a
module prints while it imports is held back: shown after a successful import, and its last line quoted in the cause
of a failed one. An import that takes more than :data:`SLOW_IMPORT_S` seconds is named on stderr in one line when it
finishes. A built-in module whose source does not bind the declaration attribute at top level is a helper: it is
read (not imported: helpers may import torch), skipped, and listed.

Importing this module imports nothing heavy: implementations (which import torch) are loaded only by a job.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import inspect
import io
import os
import pkgutil
import signal
import sys
import threading
import time
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any, Generic, TypeVar
from collections.abc import Callable, Iterator, Mapping

from intact.unimported import binds, module_ast, top_level_names
from intact.plugins import Plugin, entry_point_origin, group_entry_points, identity, mark_loaded
from intact.removed import removal_hint, removed_uses, renamed_message

T = TypeVar("T")

#: environment variable: seconds a declaration's import may take before it is named on stderr (default 3)
SLOW_IMPORT_ENV = "INTACT_SLOW_IMPORT_S"
SLOW_IMPORT_S = 3.0


class RegistryError(KeyError):
    """An unknown name, or one whose declaration failed to load; ``str()`` is the one-line message."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def resolve(registry: Mapping[str, T], name: str, what: str) -> T:
    """``registry[name]``, or a :class:`RegistryError` (a KeyError) that lists the known names."""
    try:
        return registry[name]
    except RegistryError:
        raise
    except KeyError:
        raise RegistryError(f"unknown {what} {name!r}; known: {', '.join(sorted(registry))}") from None


@functools.cache
def import_target(target: str) -> Any:
    """The object a target names: import ``"package.module:attr"`` and return the attribute. Cached: one object per
    target."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def target_problem(target: str) -> str | None:
    """Why ``"package.module:attr"`` would not load, found without running the module (no torch import):
    the module must be findable and its source must define ``attr`` at top level. None: it looks right.
    (Finding ``a.b.c`` imports the packages ``a`` and ``a.b``, not ``c``.)"""
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr.isidentifier():
        return f"{target!r} is not of the form 'package.module:attribute'"
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as err:
        return f"module {module!r} cannot be found ({type(err).__name__}: {err})"
    if spec is None:
        return f"module {module!r} cannot be found"
    if spec.origin and spec.origin.endswith(".py") and attr not in top_level_names(spec.origin):
        return f"module {module!r} ({spec.origin}) defines no {attr!r}"
    return None


def accepts(hook: Callable[..., Any], count: int) -> bool:
    """Whether ``hook`` can be called with ``count`` positional arguments (True where its signature cannot be
    read, as for some builtins)."""
    try:
        inspect.signature(hook).bind(*range(count))
    except TypeError:
        return False
    except ValueError:
        return True
    return True


def hook_problem(hook: Callable[..., Any], count: int, expected: str) -> str | None:
    """Why a declaration's hook cannot be called with ``count`` positional arguments, naming it, its signature
    and the ``expected`` one; None if it can."""
    if accepts(hook, count):
        return None
    try:
        signature = str(inspect.signature(hook))
    except (TypeError, ValueError):
        signature = "(...)"
    name = f"{getattr(hook, '__module__', '?')}.{getattr(hook, '__qualname__', type(hook).__name__)}{signature}"
    return f"hook {name} does not fit the signature {expected}"


def check_implementation(target: str, where: str, method: bool = False) -> None:
    """A declaration's ``implementation``, checked when the declaration is made: a ``"package.module:Class"``
    string that resolves (:func:`target_problem`: found without importing it, so without torch) in a module that
    uses no name version 0.2.0 removed (:func:`intact.removed.removed_uses`, read from its source; for a ``method``'s
    class, also what left ContinualMethod); a TypeError naming ``where`` otherwise. The package's own modules are
    not read for removed names at run time (~0.06 s a process): ``tests/test_one_meaning.py`` reads every one."""
    if callable(target):   # 0.1 also took a function returning the class
        function = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"
        raise TypeError(f"{where}: implementation {function} is a function; removed in version 0.2.0: name a "
                        "module-level class as 'package.module:Class' (CHANGELOG.md)")
    problem = target_problem(target)
    if problem:
        raise TypeError(f"{where}: implementation {target!r} does not resolve: {problem}")
    module, _, name = target.partition(":")
    if module.split(".")[0] == "intact":
        return
    origin = getattr(importlib.util.find_spec(module), "origin", None)
    if not (origin and origin.endswith(".py")):
        return
    uses = removed_uses(module_ast(origin), origin, name if method else None)
    if uses:
        raise TypeError(f"{where}: implementation {target!r}: {uses[0]}")


@dataclass(frozen=True)
class Failure:
    """Why the declaration of ``name`` could not be loaded, and where it came from."""

    name: str
    origin: str   #: "module intact.methods.x" or "entry point 'x = pkg.mod:METHOD' of distribution 'pkg 1.0'"
    cause: str    #: "ModuleNotFoundError: No module named 'foo'" (one line)

    def message(self, what: str) -> str:
        return f"{what} {self.name!r} cannot be loaded: {self.origin}: {self.cause}"


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


class _Load:
    """What :func:`_loading` saw of one import: its failure (None: it loaded), whether a real SIGINT arrived,
    and what it printed."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.interrupted = False
        self.out, self.err = io.StringIO(), io.StringIO()

    def cause(self) -> str:
        """The failure in one line, with the last line the module printed (argparse's ``error: ...``)."""
        assert self.error is not None
        printed = [line.strip() for line in (self.err.getvalue() + self.out.getvalue()).splitlines() if line.strip()]
        said = f" (its last output line: {printed[-1][:200]!r})" if printed else ""
        return _one_line(self.error) + removal_hint(self.error) + said


@contextlib.contextmanager
def _loading(origin: str) -> Iterator[_Load]:
    """Run one declaration's import: every exception it raises is kept in the yielded :class:`_Load`, not
    raised, except a real Ctrl-C. A SIGINT handler is installed for the import's duration (main thread only:
    signals arrive there) that records the signal and then does what the previous handler does; so a
    ``KeyboardInterrupt`` with no signal behind it is the plugin's own, and is recorded like any failure,
    while one the user caused is raised again (even if the plugin swallowed it). What the module prints goes
    to the terminal after a successful import; an import slower than :data:`SLOW_IMPORT_S` is named."""
    load = _Load()
    previous = _sigint_handler(load)
    start = time.monotonic()
    try:
        with contextlib.redirect_stdout(load.out), contextlib.redirect_stderr(load.err):
            yield load
    except BaseException as err:  # noqa: BLE001  (recorded: only a config that uses it is refused)
        load.error = err
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if load.interrupted:
        raise KeyboardInterrupt
    for stream, held in ((sys.stdout, load.out), (sys.stderr, load.err)):
        if load.error is None and stream is not None and held.getvalue():
            stream.write(held.getvalue())
    took = time.monotonic() - start
    if took > float(os.environ.get(SLOW_IMPORT_ENV) or SLOW_IMPORT_S):
        print(f"intact: {origin} took {took:.1f} s to import", file=sys.stderr)


def _sigint_handler(load: _Load) -> Any:
    """Install the handler :func:`_loading` describes; the previous handler (None: not the main thread, or a
    handler set outside Python, which is left alone)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGINT)
    if previous is None:
        return None

    def on_sigint(signum: int, frame: Any) -> None:
        load.interrupted = True
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    return previous


class Registry(Mapping[str, T], Generic[T]):
    """The declarations of one kind: the built-ins (each module of ``package`` that defines ``attr``), then the
    entry points of group ``group``, each imported when first looked up. A read-only mapping whose keys are names
    (``items()`` imports every plugin; :meth:`loaded` does not); a name that failed to load is in :attr:`failures`.

    ``kind``: the declaration class; ``what``: its name in messages ("method"); ``skip``: module names of
    ``package`` that are not declarations (besides those without ``attr``, skipped anyway); ``renamed``: former
    names -> the names that replaced them, refused in one line naming the new name."""

    def __init__(self, what: str, kind: type, package: str, attr: str, group: str, skip: tuple[str, ...] = (),
                 renamed: Mapping[str, str] | None = None):
        self.what, self.kind, self.package, self.attr, self.group = what, kind, package, attr, group
        self.renamed: Mapping[str, str] = renamed or {}
        self._found: dict[str, T] = {}
        self._origin: dict[str, str] = {}
        self.failures: dict[str, Failure] = {}
        #: plugins that declare a built-in's name: never loaded, and named on stderr when found
        self.refused: dict[str, Failure] = {}
        self._entry: dict[str, EntryPoint] = {}   # the plugins that may be loaded, by name
        self._plugins: dict[str, Plugin] = {}     # their identities, as found
        #: modules of ``package`` that define no ``attr`` (helpers), by module name
        self.skipped: list[str] = []
        self._builtins(skip)
        self.builtin: frozenset[str] = frozenset(self._found)   #: the names declared by ``package`` itself
        self._installed()

    # -- the mapping: a plugin is loaded when looked up ----------------------------------------------
    def __getitem__(self, name: str) -> T:
        if name in self._entry and name not in self._found and name not in self.failures:
            self._load(name)
        if name in self._found:
            return self._found[name]
        if name in self.failures:
            raise RegistryError(self.failures[name].message(self.what))
        if name in self.skipped:
            raise RegistryError(f"unknown {self.what} {name!r} (module {self.package}.{name} defines no {self.attr}); "
                                f"known: {', '.join(sorted(self._found))}")
        if name in self.renamed:
            raise RegistryError(renamed_message(self.what, name, self.renamed[name]))
        return resolve(dict.fromkeys(self), name, self.what)  # raises: unknown, listing the names

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys(n for n in [*self._found, *self._entry] if self.declares(n)))

    def __len__(self) -> int:
        return len(list(iter(self)))

    def declares(self, name: str) -> bool:
        """Whether ``name`` is a built-in's or a plugin's that has not failed, found without importing it (``in``
        imports a plugin to look it up)."""
        return name in self._found or (name in self._entry and name not in self.failures)

    def loaded(self) -> dict[str, T]:
        """The declarations imported so far: the built-ins and the plugins looked up."""
        return dict(self._found)

    def plugin(self, name: str) -> Plugin | None:
        """The identity of plugin ``name`` (distribution, version, digest of its files: :mod:`intact.plugins`),
        found without importing it; None for a built-in or an unknown name."""
        if name in self._entry and name not in self._plugins:
            self._plugins[name] = identity(self.what, self._entry[name])
        return self._plugins.get(name)

    def builtins(self) -> dict[str, T]:
        """The package's own declarations, whatever else is installed (for the project's own tooling)."""
        return {n: d for n, d in self._found.items() if n in self.builtin}

    def origin(self, name: str) -> str:
        """Where the declaration of ``name`` comes from (a module or an entry point)."""
        return self._origin[name]

    # -- discovery -------------------------------------------------------------------------------------
    def _add(self, name: str, decl: Any, origin: str) -> None:
        if not isinstance(decl, self.kind):
            self._fail(name, origin, f"expected a {self.kind.__module__}.{self.kind.__qualname__}, "
                                     f"got {type(decl).__name__}")
        elif name in self.renamed:
            self._fail(name, origin, renamed_message(self.what, name, self.renamed[name]) + "; declare another name")
        elif name in self._found or name in self.failures:
            first = self._origin.get(name) or self.failures[name].origin
            self._found.pop(name, None)
            self._fail(name, origin, f"{self.what} {name!r} is declared twice (also by {first}); uninstall one")
        else:
            self._found[name] = decl
            self._origin[name] = origin

    def _fail(self, name: str, origin: str, cause: str) -> None:
        self.failures.setdefault(name, Failure(name, origin, cause))

    def _builtins(self, skip: tuple[str, ...]) -> None:
        pkg = importlib.import_module(self.package)
        for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
            if info.ispkg or info.name in skip:
                continue
            module, origin = f"{self.package}.{info.name}", f"module {self.package}.{info.name}"
            decl = None
            with _loading(origin) as load:
                # read before importing: a helper module (which may import torch) is never imported here
                if binds(Path(getattr(info.module_finder, "path", "")) / f"{info.name}.py", self.attr):
                    decl = getattr(importlib.import_module(module), self.attr, None)
            if load.error is not None:
                self._fail(info.name, origin, load.cause())
                continue
            if decl is None:
                self.skipped.append(info.name)
                continue
            self._add(getattr(decl, "name", info.name), decl, origin)

    def _installed(self) -> None:
        """The entry points by name, none imported: one that takes a built-in's name is refused (and named on
        stderr), one name declared twice fails, a former name fails naming the new one."""
        reserved = {*self._found, *self.failures, *self.skipped}
        for name, eps in group_entry_points(self.group).items():
            origin = entry_point_origin(eps[0])
            if name in reserved:
                where = self._origin.get(name) or f"module {self.package}.{name}"
                self.refused[name] = Failure(name, origin, f"{self.what} {name!r} is built in ({where}); a plugin "
                                                           "must declare another name")
                print(f"intact: refused {origin}: {self.refused[name].cause}", file=sys.stderr)
            elif name in self.renamed:
                former = renamed_message(self.what, name, self.renamed[name])
                self._fail(name, origin, former + "; declare another name")
            elif len(eps) > 1:
                self._fail(name, origin, f"{self.what} {name!r} is declared twice (also by "
                                         f"{entry_point_origin(eps[1])}); uninstall one")
            else:
                self._entry[name] = eps[0]

    def _load(self, name: str) -> None:
        """Import plugin ``name`` (once): its declaration, or its failure."""
        ep = self._entry[name]
        origin = entry_point_origin(ep)
        with _loading(origin) as load:
            decl = ep.load()
        if load.error is not None:
            return self._fail(name, origin, load.cause())
        declared = getattr(decl, "name", name)
        if isinstance(decl, self.kind) and declared != name:
            return self._fail(name, origin, f"it declares {self.what} {declared!r}; the entry point's name must be "
                                            f"the {self.what}'s name (write '{declared} = {ep.value}')")
        self._add(name, decl, origin)
        if name in self._found:
            mark_loaded(self.plugin(name))
