"""What version 0.2.0 renamed and removed (CHANGELOG.md, "0.2.0 (breaking)"): each former name is refused in one line
that names what replaces it; nothing answers to it any more.

The former method names are listed here once: a config that names one is refused (:func:`intact.config.validate_config`,
the method registry), and ``intact migrate`` (:mod:`intact.migrate`) renames a results tree that 0.1 stored under them.
:data:`REMOVED` lists the plugin contract's removed names: a plugin that uses one fails when the registry loads it, in
one line naming the removal (:func:`removal_hint`: its import's error; :func:`removed_uses`: its implementation module's
source, read without importing it).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from typing import Any

#: version 0.1's method names -> the names that replaced them (its runs were stored under the former ones)
RENAMED_METHODS = {"c_prompt": "compositional_prompt", "cprompt": "consistent_prompt"}

#: what turns a results tree stored by 0.1 into one of 0.2
MIGRATE = "intact migrate <results>"

#: a removed name, as a plugin's code spells it (an attribute, a keyword, ``module.name`` or ``Class.name``) -> what
#: replaces it
REMOVED = {
    "stored_as": "Method(stored_as=...) is gone: a method's runs are stored under its name (`intact migrate` renames "
                 "what 0.1 stored under a former one)",
    "Method.load": "Method.load() is Method.import_class()",
    "BenchmarkType.load": "BenchmarkType.load() is BenchmarkType.import_class()",
    "load_target": "intact.registry.load_target is intact.registry.import_target",
    "BENCHMARK_TYPES": "intact.data.BENCHMARK_TYPES is intact.data.BENCHMARKS",
    **{f"BenchmarkType.{n}": f"BenchmarkType({n}=...) is gone: {what}" for n, what in (
        ("keys", "a type's settings dataclass declares its keys (a shared field a type does not take: "
                 "setting(..., settable=False))"),
        ("docs", "a key's description is its setting()'s: declare the field again in the type's settings subclass"),
        ("defaults", "a key's default is its setting()'s: declare the field again in the type's settings subclass"))},
    "with_queries": "ContinualMethod.with_queries is gone: iterate over intact.methods.shared.base.batches(self, "
                    "data), where the query reads the job's cached queries",
    "draw_preview": "Benchmark.draw_preview(path) is gone: return an intact.data.base.Preview from preview(), and the "
                    "report layer draws it",
    "FrozenViT._tokens": "FrozenViT._tokens is FrozenViT.tokens",
    **{f"intact.methods.declare.{n}": f"intact.methods.declare.{n} is intact.settings.{n}"
       for n in ("setting", "defaults", "fields_schema", "BOUND_KEYWORDS")},
    **{f"intact.report.paper.{n}": f"intact.report.paper.{n} is {m}.{n}"
       for n, m in (("StoredRun", "intact.results"), ("Stat", "intact.metrics"), ("Paired", "intact.metrics"),
                    ("files_digest", "intact.hashing"))},
    "intact.models.arch.DIGITS_VIT": "intact.models.arch.DIGITS_VIT is intact.models.DIGITS_VIT",
    "stored_query": "ContinualMethod.stored_query is gone: mark the query @frozen_feature(QUERY, "
                    "benchmark_cache=True) (intact.methods.shared.frozen)",
    "cached_query": "ContinualMethod.cached_query is gone: mark the query @frozen_feature(QUERY, "
                    "benchmark_cache=...) (intact.methods.shared.frozen)",
    "feature_fns": "ContinualMethod.feature_fns is gone: mark each function of frozen parts @frozen_feature "
                   "(intact.methods.shared.frozen); the job finds them",
    "cached": "ContinualMethod.cached is gone: a function marked @frozen_feature returns the batch's cached rows "
              "itself (intact.methods.shared.frozen)",
    "double_ce": "ContinualMethod.double_ce is gone: InTAct's penalty doubles CE (watch_layers(..., doubles_ce=True))",
    "reg": "ContinualMethod.reg is gone: InTAct's state lives in its penalty (a family's self.intact, "
           "intact.methods.shared.penalties.watch_layers; its .tracker holds the hypercubes and the anchors)",
    "IntactRegularizer(None)": "IntactRegularizer(None, ...) is gone: HypercubeTracker(model, layers) keeps the "
                               "hypercubes without InTAct's terms",
    # the method contract of 0.2.0 (docs/adding-a-method.md, "The contract"): what left ContinualMethod
    "ContinualMethod.start_task": "ContinualMethod.start_task is begin_task (it runs after the penalties' "
                                  "begin_task, as start_task did)",
    "ContinualMethod.loss": "ContinualMethod.loss is the job's intact.methods.shared.base.batch_loss(method, x, y): a "
                            "method adds to its loss through forward_train's auxiliary loss or a Penalty",
    **{f"ContinualMethod.{n}": f"ContinualMethod.{n}() is intact.methods.shared.base.{n}(method)"
       for n in ("trainable_state", "load_trainable_state", "num_trainable_parameters")},
    "ContinualMethod.prediction_head": "ContinualMethod.prediction_head is gone: HypercubeRecorder(tracker, "
                                       "predicting=...) (intact.methods.shared.penalties) names the head that predicts",
    "ContinualMethod.intact_teacher": "ContinualMethod.intact_teacher is gone: watch_layers(..., teacher_feature=fn) "
                                      "gives L_Feat's teacher feature fn(x, q)",
    "ContinualMethod.generator": "self.generator(task, purpose) is intact.seeding.task_generator(self.run.seed, task, "
                                 "purpose)",
    "ContinualMethod.batches": "self.batches(data) is intact.methods.shared.base.batches(self, data)",
    "ContinualMethod.__init__": "ContinualMethod.__init__(run, settings) keeps no backbone, num_classes or num_tasks "
                                "and has no query(): a method keeps what its constructor gets (as PromptMethod does)",
}
#: what a method class may no longer define (0.1's hooks of ContinualMethod that left it)
DEFINED_BY_METHOD = ("start_task", "loss", "trainable_state", "load_trainable_state", "num_trainable_parameters",
                     "prediction_head", "intact_teacher")
#: what a method class may no longer read from ContinualMethod (all of them), or from it directly (the rest)
READ_BY_METHOD = ("generator", "batches")
READ_BY_DIRECT_SUBCLASS = ("backbone", "num_classes", "num_tasks", "query")
#: what a plugin's implementation module may not use (read from its source: unambiguous names only)
SCANNED = ("with_queries", "load_target", "BENCHMARK_TYPES", "stored_query", "double_ce", "cached_query", "feature_fns")
#: what a plugin's implementation may only read as 0.1's base class set it (``self.<name>`` read and never set)
READ_FROM_BASE = ("reg", "cached")
#: what the messages of an import that uses a removed name say, and where the name is in them
_ERRORS = (re.compile(r"cannot import name '(?P<name>\w+)' from '(?P<owner>[\w.]+)'"),
           re.compile(r"module '(?P<owner>[\w.]+)' has no attribute '(?P<name>\w+)'"),
           re.compile(r"(?P<owner>\w+)\.__init__\(\) got an unexpected keyword argument '(?P<name>\w+)'"),
           re.compile(r"unexpected keyword argument '(?P<name>\w+)'"),
           re.compile(r"'(?P<owner>\w+)' object has no attribute '(?P<name>\w+)'"))


#: a former method name in a config: a run name's base (``<old>+intact@...``; a ``methods`` key) or in a
#: ``methods.<old>.`` key
_FORMER = re.compile(rf"^({'|'.join(RENAMED_METHODS)})(?:$|[+@-])|(?:^|[@,])methods\.({'|'.join(RENAMED_METHODS)})\.")


def renamed_in_config(cfg: Any, where: str = "") -> tuple[str, str] | None:
    """(key, former name) of the first run name, ``methods`` / ``per_method`` key or ``methods.<name>.`` key of the
    config data ``cfg`` that uses a method name version 0.2.0 replaced (:data:`RENAMED_METHODS`); None if none does."""
    items = cfg.items() if isinstance(cfg, Mapping) else enumerate(cfg) if isinstance(cfg, list) else ()
    for key, value in items:
        path = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else str(key)
        for text in (key, value):
            found = _FORMER.search(text) if isinstance(text, str) else None
            if found:
                return path, found.group(1) or found.group(2)
        inner = renamed_in_config(value, path)
        if inner:
            return inner
    return None


def renamed_message(what: str, old: str, new: str) -> str:
    """One line: ``old`` is ``new`` since 0.2.0, and how to rename what was stored under it."""
    return (f"{what} {old!r} is named {new!r} since version 0.2.0 (CHANGELOG.md); results stored under the old name: "
            f"`{MIGRATE}`")


def removal(key: str) -> str:
    return f"removed in version 0.2.0: {REMOVED[key]} (CHANGELOG.md)"


def removal_hint(error: BaseException) -> str:
    """``"; removed in version 0.2.0: ..."`` where ``error`` (a plugin's import failing) names a removed name."""
    for pattern in _ERRORS:
        found = pattern.search(str(error))
        if found:
            owner, name = found.groupdict().get("owner"), found["name"]
            for key in (f"{owner}.{name}", name):
                if key in REMOVED:
                    return "; " + removal(key)
    return ""


def removed_uses(tree: ast.Module, filename: str, cls: str | None = None) -> list[str]:
    """Where the module ``tree`` (parsed from ``filename``) uses a removed name (:data:`SCANNED`, also as a class
    attribute or a method; ``self.reg`` / ``self.cached`` read and never set; a class that defines ``draw_preview``;
    the implementation class ``cls`` using what left ContinualMethod: :func:`_contract_uses`):
    ``"<filename>:<line>: removed in version 0.2.0: ..."`` each."""
    out = _contract_uses(tree, cls) if cls else []
    for name in READ_FROM_BASE:
        uses = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == name
                and isinstance(n.value, ast.Name) and n.value.id == "self"]
        if not any(isinstance(n.ctx, ast.Store) for n in uses):
            out += [(n.lineno, name) for n in uses]
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            out += [(f.lineno, f.name) for f in node.body
                    if isinstance(f, ast.FunctionDef) and f.name in ("draw_preview", *SCANNED)]
            out += [(f.lineno, t.id) for f in node.body if isinstance(f, (ast.Assign, ast.AnnAssign))
                    for t in getattr(f, "targets", [getattr(f, "target", None)])
                    if isinstance(t, ast.Name) and t.id in SCANNED]
        elif isinstance(node, ast.Attribute) and node.attr in SCANNED:
            out.append((node.lineno, node.attr))
        elif isinstance(node, ast.ImportFrom):
            out += [(node.lineno, a.name) for a in node.names if a.name in SCANNED]
    return [f"{filename}:{line}: {removal(name)}" for line, name in sorted(out)]


def _contract_uses(tree: ast.Module, cls: str) -> list[tuple[int, str]]:
    """Where the method class ``cls`` and its ancestors in the same module use what left ContinualMethod in 0.2.0:
    define one of :data:`DEFINED_BY_METHOD`; read ``self.<name>`` of :data:`READ_BY_METHOD` (or, deriving from
    ContinualMethod itself, of :data:`READ_BY_DIRECT_SUBCLASS`) that the module never sets nor defines; or pass
    ContinualMethod's constructor more than (run, settings)."""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    chain: list[ast.ClassDef] = []
    todo = [cls]
    while todo:
        node = classes.get(todo.pop())
        if node is not None and node not in chain:
            chain.append(node)
            todo += [b.id for b in node.bases if isinstance(b, ast.Name)]
    defined = {f.name for c in chain for f in c.body if isinstance(f, ast.FunctionDef)}
    out = [(f.lineno, f"ContinualMethod.{f.name}") for c in chain for f in c.body
           if isinstance(f, ast.FunctionDef) and f.name in DEFINED_BY_METHOD]
    direct = [c for c in chain if any(getattr(b, "id", getattr(b, "attr", None)) == "ContinualMethod"
                                      for b in c.bases)]
    names = READ_BY_METHOD + (READ_BY_DIRECT_SUBCLASS if direct else ())
    attrs = [n for c in chain for n in ast.walk(c) if isinstance(n, ast.Attribute)
             and isinstance(n.value, ast.Name) and n.value.id == "self" and n.attr in names]
    stored = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)}
    out += [(n.lineno, "ContinualMethod." + (n.attr if n.attr in READ_BY_METHOD else "__init__")) for n in attrs
            if n.attr not in stored and n.attr not in defined]
    out += [(n.lineno, "ContinualMethod.__init__") for c in direct for n in ast.walk(c) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute) and n.func.attr == "__init__" and isinstance(n.func.value, ast.Call)
            and getattr(n.func.value.func, "id", None) == "super" and len(n.args) > 2]
    return out
