"""Config files in layers: a file may name the file it extends (``extends: base.yaml``, relative to itself).

The four paper configs share one base (``configs/paper/base.yaml``) and each adds a short overlay. A
layered file reads as the deep merge of its base and itself (mappings merge key by key; any other value,
lists and ``null`` included, replaces), the same rule ``snakemake --configfile`` applies between files.
Every reader resolves ``extends`` through this module, once, with :func:`read_files` (several files, layered as
``snakemake --configfile`` layers them): the Snakefile (:func:`workflow_config`), ``intact validate`` / ``intact
runs``, ``intact speed``, ``python -m intact.tracking`` and the test kit.

Every YAML file the package reads goes through one loader, :func:`load_file`, which bounds it before it is
constructed or expanded, refuses a key given twice in one mapping and names the file and line of every problem
in one line. The bounds: its size, and what its YAML aliases expand to (a "billion laughs" file of a few hundred
bytes holds 10^9 values once ``*alias`` repeats a list ten times over nine levels). A loaded YAML file shares an
aliased list or mapping, so it stays small until something walks it (a schema validator, ``repr`` in a message,
Snakemake's own merge of mappings); the bounds count what a walk would see, without walking it
(:func:`check_size` on loaded data, the same on a file's node graph).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterable, Mapping

import yaml

EXTENDS = "extends"

#: the bounds of a config, far above any real one (config.yaml: 7 KB, about 270 values once expanded, depth 7;
#: configs/paper/base.yaml: 12 KB): the bytes of one file, the values of a config once every YAML alias is
#: expanded, and how deep lists and mappings nest
MAX_FILE_BYTES = 256 * 1024
MAX_VALUES = 100_000
MAX_DEPTH = 32


class LayerError(ValueError):
    """A layered config file that is missing, not a mapping, or extends itself."""


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """A deep-merged copy: ``over``'s mappings merge into ``base``'s, its other values replace them."""
    out = copy.deepcopy(dict(base))
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else copy.deepcopy(v)
    return out


#: a container's items as (key or index, item); None for a scalar
Children = Callable[[Any], "list[tuple[Any, Any]] | None"]


def _measure(root: Any, length: Callable[[Any], int | None], children: Children) -> dict[int, tuple[int, int]]:
    """``id -> (values, depth)`` of every container under ``root`` (``length``: its item count, None for a
    scalar), each counted as often as aliases repeat it, in time linear in the distinct containers (the expansion
    itself is never walked; nor is a container of more than :data:`MAX_VALUES` items: its depth counts as 1).
    Raises :class:`LayerError` on a container that holds itself (``&a [*a]``)."""
    done: dict[int, tuple[int, int]] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        n = length(node)
        if n is None or (id(node) in done and not finished):
            continue
        if finished:
            on_path.discard(id(node))
            sizes = [done.get(id(i), (0, 0)) for _, i in children(node) or []]
            done[id(node)] = (n + sum(v for v, _ in sizes), 1 + max((d for _, d in sizes), default=0))
        elif id(node) in on_path:
            raise LayerError("a list or mapping holds itself (a YAML alias inside its own anchor): it would expand "
                             "without end")
        elif n > MAX_VALUES:
            done[id(node)] = (n, 1)
        else:
            on_path.add(id(node))
            stack.append((node, True))
            stack.extend((i, False) for _, i in children(node) or [])
    return done


def _data_length(node: Any) -> int | None:
    return len(node) if isinstance(node, (Mapping, list, tuple)) else None


def _data_children(node: Any) -> list[tuple[Any, Any]] | None:
    if isinstance(node, Mapping):
        return list(node.items())
    return list(enumerate(node)) if isinstance(node, (list, tuple)) else None


def _node_length(node: yaml.Node) -> int | None:
    return len(node.value) if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) else None


def _node_children(node: yaml.Node) -> list[tuple[Any, Any]] | None:
    if isinstance(node, yaml.MappingNode):
        return [(getattr(k, "value", "?"), v) for k, v in node.value]
    return list(enumerate(node.value)) if isinstance(node, yaml.SequenceNode) else None


def _bound(root: Any, length: Callable[[Any], int | None], children: Children, where: str) -> None:
    """:class:`LayerError` if ``root`` nests deeper than :data:`MAX_DEPTH` or expands to more than
    :data:`MAX_VALUES` values, naming the key that holds the excess (the largest part, followed down while one
    part alone is over the bound)."""
    try:
        done = _measure(root, length, children)
    except LayerError as err:
        raise LayerError(f"{where}: {err}") from None
    values, depth = done.get(id(root), (0, 0))
    if depth > MAX_DEPTH:
        raise LayerError(f"{where}: lists and mappings nest {depth} deep; at most {MAX_DEPTH}")
    if values <= MAX_VALUES:
        return
    path, node = "", root
    while (length(node) or 0) <= MAX_VALUES:  # a longer one was not walked: it is the part to name
        sized = sorted(((done.get(id(c), (1, 0))[0], k, c) for k, c in children(node) or []), key=lambda t: -t[0])
        if not sized or sized[0][0] <= MAX_VALUES or (len(sized) > 1 and sized[1][0] == sized[0][0]):
            break
        values, label, node = sized[0]
        path += f"[{label}]" if isinstance(label, int) else (f".{label}" if path else str(label))
    raise LayerError(f"{where}: {f'key {path!r}' if path else 'it'} holds at least {values:,} values (YAML aliases "
                     f"counted as often as they repeat); a config holds at most {MAX_VALUES:,}")


def check_size(data: Any, where: str = "config") -> None:
    """Loaded config data within :data:`MAX_VALUES` and :data:`MAX_DEPTH`, measured without expanding it."""
    _bound(data, _data_length, _data_children, where)


#: the YAML loader (libyaml's where it is installed); :func:`load_text` composes, checks, then constructs with it
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE_TAG = "tag:yaml.org,2002:merge"


def load_file(path: str | Path, what: str = "config file") -> Any:
    """The package's one reader of YAML files (config files and their bases, the config schema, the paper's
    numbers): the file within :data:`MAX_FILE_BYTES`, checked before it is read, then :func:`load_text`. Every
    problem is a :class:`LayerError` of one line naming the file."""
    path = Path(path)
    where = f"{what} {str(path)!r}"
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise LayerError(f"{where} has {size:,} bytes; at most {MAX_FILE_BYTES:,} (a config is a few kilobytes)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise LayerError(f"{where}: not UTF-8 text ({err.reason} at byte {err.start:,})") from None
    return load_text(text, where)


def load_text(text: str, where: str) -> Any:
    """YAML ``text`` (a file's, named by ``where``) as data: its node graph (composed, not constructed: nothing is
    expanded) within :data:`MAX_VALUES` and :data:`MAX_DEPTH` once its aliases are expanded, no key twice in one
    mapping (YAML would keep the last one silently: a second ``optim:`` block drops the first), then constructed.
    :class:`LayerError` naming ``where`` (and the line, where YAML knows it)."""
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _bound(node, _node_length, _node_children, where)
        _check_keys(node, loader, where)
        return loader.construct_document(node)
    except LayerError:
        raise
    except yaml.YAMLError as err:
        raise LayerError(f"{where}: not valid YAML: {_yaml_problem(err)}") from None
    except RecursionError:
        raise LayerError(f"{where}: lists and mappings nest too deep to read; at most {MAX_DEPTH}") from None
    except ValueError as err:  # a value YAML matched but Python refuses: an integer of over 4,300 digits, a bad date
        raise LayerError(f"{where}: a value cannot be read: {' '.join(str(err).split())}") from None
    finally:
        loader.dispose()


def _yaml_problem(err: yaml.YAMLError) -> str:
    """A YAML error in one line: what is wrong and where (line and column, 1-based)."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    problem = ": ".join(filter(None, (getattr(err, "context", None), getattr(err, "problem", None)))) or str(err)
    at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return " ".join(problem.split()) + at


def _check_keys(root: yaml.Node, loader: Any, where: str) -> None:
    """:class:`LayerError` naming the line and the key where a mapping of the node graph holds a key twice (keys
    compared as constructed: ``1`` and ``1.0`` are one key); each node is visited once, aliases included."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if id(node) in seen or isinstance(node, yaml.ScalarNode):
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))
            continue
        lines: dict[Any, int] = {}
        for key_node, value in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                stack.append((value, path))  # ``<<: *base`` merges; a non-scalar key is refused when constructed
                continue
            key = loader.construct_object(key_node)
            label = f"{path}.{key}" if path else str(key)
            if key in lines:
                raise LayerError(f"{where}, line {key_node.start_mark.line + 1}: key {label!r} is given twice in one "
                                 f"mapping (first on line {lines[key]}); YAML would keep only the last, silently")
            lines[key] = key_node.start_mark.line + 1
            stack.append((value, label))


def read_layers(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The config of ``path`` with every ``extends`` resolved (base first), without the ``extends`` key; a message
    names a file as given (a base: joined to the folder of the file that extends it)."""
    path = Path(path)
    if path.resolve() in _seen:
        raise LayerError(f"config file {str(path)!r} extends itself (through {' -> '.join(map(str, _seen))})")
    if not path.is_file():
        raise LayerError(f"config file {str(path)!r} does not "
                         "exist" + (f" (extended by {str(_seen[-1])!r})" if _seen else ""))
    data = load_file(path) or {}
    if not isinstance(data, Mapping):
        raise LayerError(f"config file {str(path)!r}: expected a mapping at the top level")
    data = dict(data)
    parent = data.pop(EXTENDS, None)
    if parent is None:
        return data
    return merge(read_layers(path.parent / str(parent), (*_seen, path.resolve())), data)


def read_files(paths: Iterable[str | Path]) -> dict[str, Any]:
    """Several config files layered in order, each with its ``extends`` resolved: what Snakemake
    makes of ``configfile: first`` and ``--configfile second third`` (a later file wins, mappings merged key by
    key; one file at a time, as Snakemake merges them)."""
    out: dict[str, Any] = {}
    for layer in map(read_layers, paths):
        out = merge(out, layer)
    return out


def workflow_config(files: Iterable[str | Path], overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The Snakefile's config, layered once: each of ``files`` that exists (``config.yaml``, then each
    ``--configfile``) with its ``extends`` resolved, then the ``--config`` overrides. Snakemake merges the same
    files without knowing ``extends`` (and its loader keeps the last of two equal keys): the workflow replaces
    that merge by this one, and each file is read by :func:`load_file` once, before Snakemake reads
    ``config.yaml``."""
    return merge(read_files(p for p in map(Path, files) if p.is_file()), overrides or {})
