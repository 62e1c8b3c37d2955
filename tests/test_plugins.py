"""Plugin failures stay local (intact.registry): a method or benchmark whose module or entry point fails to load is
recorded, and only a config that uses it is refused, with one line naming the distribution, the entry
point or module, and the cause; every other command works. Each plugin here is a dist-info folder and a
module in a temporary directory put on the path (nothing is installed into the environment)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import REPO, plain_signals, pythonpath, snakemake, tiny_config, write_config
from intact.data import BUILTIN_TYPES
from intact.data.declare import BenchmarkType
from intact.methods.declare import Method
from intact.registry import Registry, RegistryError, import_target, resolve, target_problem
from intact.removed import RENAMED_METHODS

GOOD = '''
from dataclasses import dataclass
from intact.methods.declare import Method
from intact.settings import setting

@dataclass(frozen=True)
class S:
    weight: float = setting(1.0, "a weight", minimum=0)

METHOD = Method("{name}", S, "intact.methods.shared.network:NetworkMethod", "a plugin", uses_backbone=False)
'''

#: module source of each broken plugin, and what its refusal must say (besides the distribution and entry point)
BROKEN = {
    "missing_dep": ("import torchvision_does_not_exist\n",
                    "ModuleNotFoundError: No module named 'torchvision_does_not_exist'"),
    "not_a_method": ("METHOD = 42\n", "expected a intact.methods.declare.Method, got int"),
    "bad_bound": (GOOD.replace('minimum=0', 'minimun=0').format(name="bad_bound"),
                  "TypeError: method 'bad_bound': settings field 'weight': unknown bound minimun"),
    "bad_target": (GOOD.replace("network:NetworkMethod", "network:NoSuchClass").format(name="bad_target"),
                   "does not resolve: module 'intact.methods.shared.network'"),
    # a hook whose signature does not fit: refused when the registry loads it, naming the hook and the signature
    "bad_check": ("def check(settings):\n    return []\n" + GOOD.replace('uses_backbone=False)', 'check=check)')
                  .format(name="bad_check"), "TypeError: method 'bad_check': hook bad_check_mod.check(settings) does "
                  "not fit the signature check(settings, benchmark, backbone) -> [(key, problem), ...]"),
    # any exception an import raises, not only Exception: exiting, argparse at import, its own KeyboardInterrupt
    "exits": ("import sys\nsys.exit()\n", ": SystemExit"),
    "argparse_at_import": ("import argparse\np = argparse.ArgumentParser(prog='plugin_cli')\n"
                           "p.add_argument('--epochs', type=int, required=True)\np.parse_args()\n",
                           "SystemExit: 2 (its last output line: 'plugin_cli: error: the following arguments are "
                           "required: --epochs')"),
    "interrupts": ("raise KeyboardInterrupt\n", ": KeyboardInterrupt"),
    # a plugin written against 0.1 that uses what 0.2.0 removed: refused in one line naming the removal and what
    # replaces it (intact.removed.REMOVED), never kept working
    "v01_stored_as": (GOOD.replace("uses_backbone=False)", "uses_backbone=False, stored_as='former')")
                      .format(name="v01_stored_as"), "unexpected keyword argument 'stored_as'; removed in version "
                      "0.2.0: Method(stored_as=...) is gone: a method's runs are stored under its name"),
    "v01_setting": (GOOD.replace("from intact.settings import setting", "from intact.methods.declare import setting")
                    .format(name="v01_setting"), "cannot import name 'setting' from 'intact.methods.declare'"),
    "v01_setting_hint": (GOOD.replace("from intact.settings import setting", "from intact.methods.declare import "
                                      "setting").format(name="v01_setting_hint"),
                         "; removed in version 0.2.0: intact.methods.declare.setting is intact.settings.setting"),
    "v01_function": (GOOD.replace('"intact.methods.shared.network:NetworkMethod"', "lambda: object")
                     .format(name="v01_function"), "TypeError: method 'v01_function': implementation "
                     "v01_function_mod.<lambda> is a function; removed in version 0.2.0: name a module-level class"),
    "v01_two_arguments": ("def check(settings, benchmark):\n    return []\n" + GOOD.replace(
        "uses_backbone=False)", "check=check)").format(name="v01_two_arguments"),
        "removed in version 0.2.0: the two-argument check(settings, benchmark) is check(settings, benchmark, "
        "backbone)"),
    "v01_with_queries": (GOOD.replace("intact.methods.shared.network:NetworkMethod", "v01_with_queries_mod:Impl")
                         .format(name="v01_with_queries") + "\nclass Impl:\n    def end_task(self, data):\n"
                         "        return self.with_queries(None, None)\n",
                         "v01_with_queries_mod.py:14: removed in version 0.2.0: ContinualMethod.with_queries is "
                         "gone: iterate over intact.methods.shared.base.batches(self, data)"),
    "v01_start_task": (GOOD.replace("intact.methods.shared.network:NetworkMethod", "v01_start_task_mod:Impl")
                       .format(name="v01_start_task") + "\nclass Base:\n    def start_task(self, task, data):\n"
                       "        pass\n\nclass Impl(Base):\n    pass\n",
                       "v01_start_task_mod.py:13: removed in version 0.2.0: ContinualMethod.start_task is begin_task"),
}


GOOD_BENCH = '''
from dataclasses import dataclass
from intact.data.declare import BenchmarkSettings, BenchmarkType
from intact.settings import setting

@dataclass(frozen=True)
class S(BenchmarkSettings):
    pass

BENCHMARK = BenchmarkType("{name}", S, "intact.data.image_benchmark:ImageBenchmark", "a plugin", tasks=("a", "b"),
                          num_classes=2)
'''

#: the same for benchmarks (group ``intact.benchmarks``)
BROKEN_BENCH = {
    "bench_missing_dep": ("import torchvision_does_not_exist\n",
                          "ModuleNotFoundError: No module named 'torchvision_does_not_exist'"),
    "bench_not_a_type": ("BENCHMARK = 42\n", "expected a intact.data.declare.BenchmarkType, got int"),
    "bench_bad_tasks": (GOOD_BENCH.replace('("a", "b")', '("a", "a")').format(name="bench_bad_tasks"),
                        "TypeError: benchmark 'bench_bad_tasks': tasks must name at least one task, each once"),
    # a default of the wrong type is refused where it is declared, naming the field (as a method's is)
    "bench_bad_default": (GOOD_BENCH.replace("    pass", "    size: int = setting('32', 'image side')")
                          .format(name="bench_bad_default"), "TypeError: benchmark 'bench_bad_default': settings "
                          "field 'size': default '32' breaks its own declaration: '32' is not of type 'integer'"),
    # 0.1's contract: a class that draws its own preview, BENCHMARK_TYPES
    "bench_v01_preview": (GOOD_BENCH.replace("intact.data.image_benchmark:ImageBenchmark", "bench_v01_preview_mod:B")
                          .format(name="bench_v01_preview") + "\nclass B:\n    def draw_preview(self, path):\n"
                          "        pass\n", "bench_v01_preview_mod.py:14: removed in version 0.2.0: "
                          "Benchmark.draw_preview(path) is gone: return an intact.data.base.Preview from preview()"),
    # 0.1's second layer over setting(): a type's keys, descriptions and defaults are its settings dataclass's
    "bench_v01_keys": (GOOD_BENCH.replace("num_classes=2)", "num_classes=2, keys=())").format(name="bench_v01_keys"),
                       "unexpected keyword argument 'keys'; removed in version 0.2.0: BenchmarkType(keys=...) is "
                       "gone: a type's settings dataclass declares its keys"),
    "bench_v01_types": ("from intact.data import BENCHMARK_TYPES\n", "cannot import name 'BENCHMARK_TYPES' from "
                        "'intact.data'"),
    "bench_v01_types_hint": ("from intact.data import BENCHMARK_TYPES\n",
                             "; removed in version 0.2.0: intact.data.BENCHMARK_TYPES is intact.data.BENCHMARKS"),
}


def add_plugin(site: Path, dist: str, entry_points: dict[str, str], modules: dict[str, str],
               group: str = "intact.methods") -> None:
    """A distribution ``dist`` 0.1 in ``site``: its metadata, its ``group`` entry points, its modules."""
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = "".join(f"{k} = {v}\n" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{group}]\n{lines}")
    for name, source in modules.items():
        (site / f"{name}.py").write_text(textwrap.dedent(source))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """One good plugin (``good_plugin``) and one broken distribution per failure kind, side by side."""
    site = tmp_path_factory.mktemp("site")
    add_plugin(site, "goodplug", {"good_plugin": "goodplug_mod:METHOD"},
               {"goodplug_mod": GOOD.format(name="good_plugin")})
    for name, (source, _) in BROKEN.items():
        add_plugin(site, f"{name}_dist", {name: f"{name}_mod:METHOD"}, {f"{name}_mod": source})
    # an entry point named otherwise than the method it declares
    add_plugin(site, "renamed_dist", {"alias": "renamed_mod:METHOD"}, {"renamed_mod": GOOD.format(name="real_name")})
    for name, (source, _) in BROKEN_BENCH.items():
        add_plugin(site, f"{name}_dist", {name: f"{name}_mod:BENCHMARK"}, {f"{name}_mod": source}, "intact.benchmarks")
    add_plugin(site, "bench_renamed_dist", {"bench_alias": "bench_renamed_mod:BENCHMARK"},
               {"bench_renamed_mod": GOOD_BENCH.format(name="bench_real")}, "intact.benchmarks")
    return site


@pytest.fixture()
def registry(site, monkeypatch) -> Registry:
    monkeypatch.syspath_prepend(str(site))
    return Registry("method", Method, "intact.methods", "METHOD", "intact.methods")


@pytest.fixture()
def bench_registry(site, monkeypatch) -> Registry:
    monkeypatch.syspath_prepend(str(site))
    return Registry("benchmark type", BenchmarkType, "intact.data", "BENCHMARK", "intact.benchmarks")


def env(site: Path) -> dict[str, str]:
    return {"PYTHONPATH": pythonpath(site, REPO / "src")}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_plugin_is_recorded_and_refused_only_by_name(registry, name):
    assert "good_plugin" in registry and registry.builtin <= set(registry) and "coda_p" in registry.builtin
    assert name not in registry and name in registry.failures
    with pytest.raises(RegistryError) as err:
        registry[name]
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"method {name!r} cannot be loaded: entry point '{name} = "
                                              f"{name}_mod:METHOD'")
    assert f"of distribution '{name}_dist 0.1'" in msg and BROKEN[name][1] in msg, msg


def test_an_entry_point_named_otherwise_than_its_method_is_refused(registry):
    """Refused under the entry point's name, when a config names it; the name it declares is found only by importing
    it, so it is no name of the registry (plugins are found by their entry points' names, unimported)."""
    msg = str(pytest.raises(RegistryError, registry.__getitem__, "alias").value)
    assert "declares method 'real_name'" in msg and "write 'real_name = renamed_mod:METHOD'" in msg, msg
    assert "renamed_dist 0.1" in msg
    assert str(pytest.raises(RegistryError, registry.__getitem__, "real_name").value).startswith(
        "unknown method 'real_name'; known: ")


@pytest.mark.parametrize("name", sorted(BROKEN_BENCH))
def test_a_broken_benchmark_plugin_is_recorded_and_refused_only_by_name(bench_registry, name):
    assert bench_registry.builtin == set(BUILTIN_TYPES) <= set(bench_registry) and "bench_alias" not in bench_registry
    assert name not in bench_registry and name in bench_registry.failures
    msg = str(pytest.raises(RegistryError, lambda: bench_registry[name]).value)
    assert "\n" not in msg and msg.startswith(
        f"benchmark type {name!r} cannot be loaded: entry point '{name} = {name}_mod:BENCHMARK' (group "
        "'intact.benchmarks')")
    assert f"of distribution '{name}_dist 0.1'" in msg and BROKEN_BENCH[name][1] in msg, msg
    # the helper modules of intact.data were read, not imported
    assert {"base", "loader", "declare"} <= set(bench_registry.skipped)


def test_a_benchmark_entry_point_named_otherwise_than_its_type_is_refused(bench_registry):
    msg = str(pytest.raises(RegistryError, bench_registry.__getitem__, "bench_alias").value)
    assert "declares benchmark type 'bench_real'" in msg
    assert "write 'bench_real = bench_renamed_mod:BENCHMARK'" in msg
    assert "bench_renamed_dist 0.1" in msg, msg
    assert "bench_real" not in bench_registry


def test_a_plugin_cannot_take_a_builtins_name(monkeypatch, tmp_path, capsys):
    """Found by the entry point's name, unimported: the plugin is refused in one line naming it, the built-in (its
    runs, its folder) is the one the name means."""
    add_plugin(tmp_path, "twin", {"coda_p": "twin_mod:METHOD"},
               {"twin_mod": "raise AssertionError('imported')\n"})
    add_plugin(tmp_path, "bench_twin", {"digits": "bench_twin_mod:BENCHMARK"},
               {"bench_twin_mod": "raise AssertionError('imported')\n"}, "intact.benchmarks")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("method", Method, "intact.methods", "METHOD", "intact.methods")
    bench = Registry("benchmark type", BenchmarkType, "intact.data", "BENCHMARK", "intact.benchmarks")
    assert reg["coda_p"].name == "coda_p" and reg.origin("coda_p") == "module intact.methods.coda_p"
    assert reg.plugin("coda_p") is None and "coda_p" in reg.refused
    assert bench["digits"].num_classes == 10 and "digits" not in bench.failures
    assert "twin_mod" not in sys.modules and "bench_twin_mod" not in sys.modules
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "intact: refused entry point 'coda_p = twin_mod:METHOD' (group 'intact.methods') of distribution 'twin 0.1': "
        "method 'coda_p' is built in (module intact.methods.coda_p); a plugin must declare another name",
        "intact: refused entry point 'digits = bench_twin_mod:BENCHMARK' (group 'intact.benchmarks') of distribution "
        "'bench_twin 0.1': benchmark type 'digits' is built in (module intact.data.digits); a plugin must declare "
        "another name"], lines


def test_two_plugins_of_one_name(monkeypatch, tmp_path):
    for dist in ("twin_a", "twin_b"):
        add_plugin(tmp_path, dist, {"twin": f"{dist}_mod:METHOD"}, {f"{dist}_mod": GOOD.format(name="twin")})
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("method", Method, "intact.methods", "METHOD", "intact.methods")
    msg = str(pytest.raises(RegistryError, lambda: reg["twin"]).value)
    assert "declared twice" in msg and "twin_a 0.1" in msg and "twin_b 0.1" in msg, msg
    assert "finetune" in reg and "twin" not in set(reg)


def test_a_former_method_name_is_refused_to_a_plugin_too(tmp_path, monkeypatch):
    """c_prompt was compositional_prompt's name in 0.1: a plugin that declares it is refused in one line naming the
    new name (a 0.1 tree that is not migrated yet stores compositional_prompt's runs there), the built-in is not."""
    add_plugin(tmp_path, "squatter", {"c_prompt": "squatter_mod:METHOD"},
               {"squatter_mod": GOOD.format(name="c_prompt")})
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("method", Method, "intact.methods", "METHOD", "intact.methods", renamed=RENAMED_METHODS)
    assert "c_prompt" not in set(reg) and "c_prompt" in reg.failures and "compositional_prompt" in reg
    msg = reg.failures["c_prompt"].message("method")
    assert "squatter 0.1" in msg and "is named 'compositional_prompt' since version 0.2.0" in msg, msg


def test_builtin_modules_failing_or_without_a_declaration(tmp_path, monkeypatch):
    """A package's own modules: one declares, one is a helper (read, not imported: skipped, named if looked
    up), one fails."""
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "good.py").write_text(GOOD.format(name="good"))
    (pkg / "helper.py").write_text("import torch_is_never_imported_here\nX = 1\n")
    (pkg / "broken.py").write_text("raise RuntimeError('boom\\nsecond line')\nMETHOD = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("method", Method, "mypkg", "METHOD", "no.such.group")
    assert set(reg) == {"good"} == set(reg.builtins()) and reg.skipped == ["helper"]
    assert str(pytest.raises(RegistryError, lambda: reg["broken"]).value) == \
        "method 'broken' cannot be loaded: module mypkg.broken: RuntimeError: boom second line"
    assert "module mypkg.helper defines no METHOD" in str(pytest.raises(KeyError, lambda: reg["helper"]).value)
    assert "unknown method 'nope'; known: good" in str(pytest.raises(KeyError, lambda: reg["nope"]).value)


def test_one_importer_and_one_resolver():
    assert import_target("intact.registry:resolve") is resolve
    # "load" reads stored data; the names that imported code under it are gone (version 0.2.0)
    from intact import registry

    assert not hasattr(registry, "load_target") and not hasattr(Method, "load")
    assert resolve({"a": 1}, "a", "thing") == 1
    assert str(pytest.raises(KeyError, resolve, {"a": 1, "b": 2}, "c",
                             "thing").value) == "unknown thing 'c'; known: a, b"
    assert target_problem("intact.registry:Registry") is None
    assert "defines no 'Nope'" in target_problem("intact.registry:Nope")
    assert "cannot be found" in target_problem("intact.no_such_module:X")
    assert "not of the form" in target_problem("intact.registry")


def run_cli(site: Path, *args: str, cwd: Path = REPO, env_extra: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "intact.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **env(site), **(env_extra or {})}, cwd=cwd, preexec_fn=plain_signals)


@pytest.mark.slow
def test_commands_that_do_not_use_a_broken_plugin_still_work(site, tmp_path):
    ok = run_cli(site, "validate", "config.yaml")
    assert ok.returncode == 0, ok.stderr
    assert run_cli(site, "runs", "config.yaml").returncode == 0
    # the project's own configuration reference ignores what else is installed
    ref = subprocess.run([sys.executable, str(REPO / "tools/config_reference.py"), "--check"], capture_output=True,
                         text=True, env={**os.environ, **env(site)})
    assert ref.returncode == 0, ref.stderr
    cfg = tiny_config(methods=["coda_p", "missing_dep"])
    write_config(tmp_path, cfg)
    bad = run_cli(site, "validate", str(tmp_path / "config.yaml"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "method 'missing_dep' cannot be loaded: entry point 'missing_dep = missing_dep_mod:METHOD'" in bad.stderr
    assert "missing_dep_dist 0.1" in bad.stderr and "ModuleNotFoundError" in bad.stderr
    for name in ("exits", "argparse_at_import", "interrupts"):  # a plugin that exits at import stops nothing else
        write_config(tmp_path, tiny_config(methods=["coda_p", name]))
        bad = run_cli(site, "validate", str(tmp_path / "config.yaml"))
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and not bad.stdout, bad
        assert f"method {name!r} cannot be loaded: entry point '{name} = {name}_mod:METHOD'" in bad.stderr, bad.stderr
        assert BROKEN[name][1] in bad.stderr, bad.stderr
    for kind, cause in (("bench_not_a_type", "got int"), ("bench_alias", "declares benchmark type 'bench_real'")):
        cfg = tiny_config(methods=["coda_p"])
        cfg["benchmarks"]["digits"]["type"] = kind
        write_config(tmp_path, cfg)
        bad = run_cli(site, "validate", str(tmp_path / "config.yaml"))
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        assert f"key 'benchmarks.digits.type': benchmark type {kind!r} cannot be loaded: entry point" in bad.stderr
        assert cause in bad.stderr, bad.stderr


@pytest.mark.slow
def test_a_slow_plugin_is_named_and_a_real_ctrl_c_still_stops(tmp_path):
    """A plugin whose import takes longer than INTACT_SLOW_IMPORT_S is named in one line when it has loaded; a
    SIGINT that arrives while a plugin loads (here the plugin sends it itself: a signal is a signal) is the
    user's Ctrl-C, and stops the command as it would without plugins."""
    add_plugin(tmp_path, "slow_dist", {"slow": "slow_mod:METHOD"},
               {"slow_mod": "import time\ntime.sleep(0.3)\n" + GOOD.format(name="slow")})
    config = str(write_config(tmp_path / "slow", tiny_config(methods=["coda_p", "slow"])))   # a plugin loads when named
    proc = run_cli(tmp_path, "validate", config, env_extra={"INTACT_SLOW_IMPORT_S": "0.1"})
    assert proc.returncode == 0, proc.stderr
    # (a built-in module may pass 0.1 s too on a loaded machine, and is named alike: only the plugin's line counts)
    lines = [line for line in proc.stderr.splitlines() if "to import" in line and "intact: module intact." not in line]
    assert len(lines) == 1 and re.fullmatch(r"intact: entry point 'slow = slow_mod:METHOD' \(group 'intact.methods'\) "
                                            r"of distribution 'slow_dist 0.1' took 0\.\d s to import", lines[0]), lines
    assert "to import" not in run_cli(tmp_path, "validate", config).stderr   # the default threshold: 3 s
    add_plugin(tmp_path, "ctrl_c_dist", {"ctrl_c": "ctrl_c_mod:METHOD"},
               {"ctrl_c_mod": "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(5)\n"})
    proc = run_cli(tmp_path, "validate", str(write_config(tmp_path / "ctrl_c", tiny_config(methods=["ctrl_c"]))))
    assert proc.returncode in (130, -signal.SIGINT) and "KeyboardInterrupt" in proc.stderr, proc


@pytest.mark.slow
def test_snakemake_runs_beside_a_broken_plugin_and_refuses_only_its_configs(site, tmp_path):
    write_config(tmp_path / "ok", tiny_config(methods=["coda_p", "good_plugin"]))
    proc = snakemake(tmp_path / "ok", "-n", env=env(site))
    assert "train_task" in proc.stdout
    write_config(tmp_path / "bad", tiny_config(methods=["coda_p", "bad_bound"]))
    proc = snakemake(tmp_path / "bad", "-n", check=False, env=env(site))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "settings field 'weight': unknown bound minimun" in out
    assert "bad_bound_dist 0.1" in out
    assert "Traceback" not in out, out[-3000:]
    write_config(tmp_path / "exits", tiny_config(methods=["coda_p", "argparse_at_import"]))
    proc = snakemake(tmp_path / "exits", "-n", check=False, env=env(site))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and BROKEN["argparse_at_import"][1] in out and "Traceback" not in out, out[-3000:]
    cfg = tiny_config(methods=["coda_p"])
    cfg["benchmarks"]["digits"]["type"] = "bench_missing_dep"
    write_config(tmp_path / "bad_bench", cfg)
    proc = snakemake(tmp_path / "bad_bench", "-n", check=False, env=env(site))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "benchmark type 'bench_missing_dep' cannot be loaded" in out, out[-3000:]
    assert "bench_missing_dep_dist 0.1" in out and "Traceback" not in out, out[-3000:]


@pytest.mark.slow
def test_a_failed_job_log_holds_its_traceback(prepared_digits, tmp_path):
    """A plugin whose implementation fails in the job: the job's log file names the exception."""
    site = tmp_path / "site"
    add_plugin(site, "failing", {"failing": "failing_mod:METHOD"}, {"failing_mod": GOOD.format(name="failing").replace(
        "intact.methods.shared.network:NetworkMethod", "failing_mod:Explodes") + textwrap.dedent('''
        class Explodes:
            def __init__(self, *args):
                raise RuntimeError("the plugin exploded in the job")
        ''')})
    cfg = tiny_config(methods=["failing"])
    cfg["benchmarks"]["digits"]["domains"] = ["blur", "noise"]      # the session's two prepared domains
    cfg["tracking"]["enabled"] = False
    cfg["studies"] = {}
    prepared_digits(cfg, tmp_path / "w")
    proc = snakemake(tmp_path / "w", check=False, env=env(site))
    assert proc.returncode != 0
    logs = list((tmp_path / "w/results/logs/train_task").rglob("task0.log"))
    assert len(logs) == 1, proc.stderr[-3000:]
    text = logs[0].read_text()
    assert "Traceback (most recent call last)" in text and "RuntimeError: the plugin exploded in the job" in text, text
