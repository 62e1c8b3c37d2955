"""Each method is declared once (intact.methods.declare); the registry, the schema's ``methods`` part, the
defaults, the early checks and docs/configuration.md are derived from the declarations."""

from __future__ import annotations

import copy
import dataclasses
import subprocess
import sys
from typing import Any

import pytest

from conftest import REPO, assert_config_error, snakemake, tiny_config, write_config
from intact.config import method_settings, resolve_run
from intact.methods import METHODS
from intact.registry import RegistryError
from intact.methods.declare import Method, settings_schema
from intact.settings import OptimConfig, recorded, setting
from intact.schema import _bound_lists, schema
from intact.layering import load_file

#: a real implementation target (a declaration checks that its target resolves)
IMPL = "intact.methods.shared.network:NetworkMethod"
BUILTIN = {p.stem for p in (REPO / "src/intact/methods").glob("*.py")} - {"__init__", "declare"}


def test_every_method_module_is_registered_under_its_own_name():
    assert BUILTIN <= set(METHODS)
    for name in BUILTIN:
        assert METHODS[name].name == name


def test_schema_methods_part_is_derived_from_the_declarations():
    props = schema()["properties"]["methods"]["properties"]
    assert set(props) == set(METHODS)
    for name, m in METHODS.items():
        declared = copy.deepcopy(settings_schema(m))
        _bound_lists(declared)   # every list bounded (issue 33 item 4), as schema() bounds them
        assert props[name] == declared
        assert set(props[name]["properties"]) == {f.name for f in dataclasses.fields(m.settings)}


@pytest.mark.parametrize("mutate, expected", [
    (lambda c: c["methods"]["coda_p"].update(length=7), ["methods.coda_p.length", "multiple of 2"]),
    (lambda c: c["methods"]["net_finetune"].update(model="resnet"), ["methods.net_finetune.model", "mlp"]),
    (lambda c: c["methods"]["lwf"].update(temperature=0), ["methods.lwf.temperature"]),
    (lambda c: c["methods"]["ewc"].update(lambda_ewc="big"), ["methods.ewc.lambda_ewc"]),
    (lambda c: c["methods"]["l2p"].update(laers=[0]), ["methods.l2p.laers", "layers"]),
    # a layer_keys list: a block twice (one prompt there, silently), a block in two lists (refused by the job before)
    (lambda c: c["methods"]["coda_p"].update(layers=[0, 2, 0]), ["methods.coda_p.layers", "lists block 0 twice"]),
    (lambda c: c["methods"]["dualprompt"].update(g_layers=[0], e_layers=[0, 1]),
     ["methods.dualprompt.e_layers", "blocks [0] are in g_layers too: each block gets one kind of prompt"]),
])
def test_declared_types_and_bounds_are_enforced_at_validation(mutate, expected):
    assert_config_error(mutate, expected)


def test_a_run_gets_every_declared_default_and_keeps_its_hash():
    cfg = load_file(REPO / "config.yaml")
    run = resolve_run(cfg, "digits", "coda_p", 0)
    assert run.settings == METHODS["coda_p"].settings()
    # the default run's hashes from before the declarations (config.yaml then copied every default)
    assert run.hash() == "11c229a9373d"
    assert resolve_run(cfg, "digits", "coda_p+intact", 0).hash() == "a266ebc22f09"
    # a configured value wins and enters the hash
    cfg["methods"] = {"coda_p": {"pool_size": 20}}
    assert resolve_run(cfg, "digits", "coda_p", 0).settings.pool_size == 20


def test_a_later_key_is_left_out_while_at_its_default():
    """One way to mark a key added later (``setting(later=True)``), in a method's settings as in the shared
    sections: left out of the run's recorded form while at its default, recorded once set otherwise."""
    assert "lr" not in recorded(method_settings("net_finetune", {}))
    assert "lr" not in recorded(method_settings("net_finetune", {"lr": 1e-2}))
    assert recorded(method_settings("net_finetune", {"lr": 0.1}))["lr"] == 0.1
    assert "drop_last" not in recorded(OptimConfig()) and recorded(OptimConfig(drop_last=True))["drop_last"]


def test_a_method_setting_keeps_the_number_as_written():
    """lambda_ewc=1 in a run name enters the hash as the integer it was recorded with (the tune study's points)."""
    assert recorded(method_settings("ewc", {"lambda_ewc": 1}))["lambda_ewc"] == 1
    assert isinstance(recorded(method_settings("ewc", {"lambda_ewc": 1}))["lambda_ewc"], int)


def test_declared_checks_stop_validation_naming_the_key():
    assert_config_error(lambda c: c["methods"]["coda_p"].update(pool_size=2), ["methods.coda_p.pool_size", "3 tasks"])


def test_a_declaration_refuses_layer_keys_it_does_not_have():
    @dataclasses.dataclass(frozen=True)
    class S:
        layers: tuple[int, ...] = setting((0,), "blocks")

    Method("ok", S, IMPL, "a method", layer_keys=("layers",))
    with pytest.raises(TypeError, match="layer_keys"):
        Method("bad", S, IMPL, "a method", layer_keys=("blocks",))


def test_a_refusal_of_intact_is_declared_with_its_reason():
    @dataclasses.dataclass(frozen=True)
    class S:
        length: int = setting(1, "tokens")

    with pytest.raises(TypeError, match="accepts '\\+intact' yet gives a reason"):
        Method("bad", S, IMPL, "a method", accepts_intact=True, intact_refusal="nothing shared")
    assert not METHODS["s_prompts"].accepts_intact and "nothing to protect" in METHODS["s_prompts"].intact_refusal
    # the config checks say the declared reason
    assert_config_error(lambda c: c["run"].update(methods=["s_prompts+intact"]),
                        ["does not accept '+intact': it shares no component between domains"])


def test_configuration_reference_is_current():
    proc = subprocess.run([sys.executable, str(REPO / "tools/config_reference.py"), "--check"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr


def test_tiny_config_fills_every_section():
    assert set(tiny_config()["methods"]) == set(METHODS)


def test_a_methods_runs_are_stored_under_its_name():
    """C-Prompt and CPrompt are compositional_prompt and consistent_prompt: their runs' names, folders and hashes
    (tests/data/run_hashes.tsv) use those names, as every method's do."""
    cfg = load_file(REPO / "config.yaml")
    run = resolve_run(cfg, "digits", "compositional_prompt+intact@methods.compositional_prompt.per_task=4", 0)
    assert run.method == "compositional_prompt+intact@methods.compositional_prompt.per_task=4"
    assert run.base == "compositional_prompt" and run.settings.per_task == 4
    assert resolve_run(cfg, "digits", "consistent_prompt", 0).to_dict()["method"] == "consistent_prompt"


#: every place a config names a method, each with a former name (version 0.1's) in it
FORMER = [
    (lambda c: c["run"].update(methods=["coda_p", "c_prompt+intact"]), "run.methods[1]", "c_prompt"),
    (lambda c: c["methods"].update(cprompt={"length": 3}), "methods.cprompt", "cprompt"),
    (lambda c: c.update(protocols={"intact": {"per_method": {"c_prompt": {"optim": {"epochs": 2}}}}}),
     "protocols.intact.per_method.c_prompt", "c_prompt"),
    (lambda c: c["run"].update(methods=["compositional_prompt@methods.c_prompt.h=2"]), "run.methods[0]", "c_prompt"),
    (lambda c: c["studies"]["tune"]["searches"][0].update(grid={"methods.cprompt.length": [1, 2]}),
     "studies.tune.searches[0].grid.methods.cprompt.length", "cprompt"),
]


@pytest.mark.parametrize("mutate, where, old", FORMER)
def test_a_former_method_name_is_refused_in_one_line_naming_the_new_one(mutate, where, old):
    new = {"c_prompt": "compositional_prompt", "cprompt": "consistent_prompt"}[old]
    assert_config_error(mutate, [f"key {where!r}: method {old!r} is named {new!r} since version 0.2.0",
                                 "intact migrate <results>"])
    msg = str(pytest.raises(RegistryError, lambda: METHODS[old]).value)
    assert "\n" not in msg and f"is named {new!r}" in msg and old not in METHODS


def test_snakemake_plans_a_renamed_methods_files_under_its_name_and_refuses_the_former_name(tmp_path):
    cfg = tiny_config(methods=["compositional_prompt"])
    write_config(tmp_path, cfg)
    assert "results/runs/digits/compositional_prompt/seed0" in snakemake(tmp_path, "-n").stdout
    proc = snakemake(tmp_path, "-n", "results/runs/digits/c_prompt/seed0/metrics.json", check=False)
    assert proc.returncode != 0 and "method 'c_prompt' is named 'compositional_prompt'" in proc.stdout + proc.stderr


def _declare(field: Any, impl: str = IMPL, name: str = "m") -> Method:
    S = dataclasses.make_dataclass("S", [("x", float, field)], frozen=True)
    return Method(name, S, impl, "a method")


@pytest.mark.parametrize("field, impl, fragment", [
    (dataclasses.field(), IMPL, "has no default"),
    (setting(1.0, minimun=0), IMPL, "unknown bound minimun"),
    (setting(1.0, items={"minimun": 0}), IMPL, "unknown items bound minimun"),
    (setting(-1.0, minimum=0), IMPL, "default -1.0 breaks its own declaration: -1.0 is less than the minimum of 0"),
    (setting(3.0, multipleOf=2), IMPL, "default 3.0 breaks its own declaration"),
    (setting("a", enum=["b"]), IMPL, "default 'a' breaks its own declaration"),
    (setting(1.0), "intact.methods.shared.network:NoSuch", "defines no 'NoSuch'"),
    (setting(1.0), "intact.methods.no_such_module:X", "module 'intact.methods.no_such_module' cannot be found"),
    (setting(1.0), "no_colon", "not of the form 'package.module:attribute'"),
])
def test_a_declaration_checks_itself_when_made(field, impl, fragment):
    """Each mistake is a TypeError at import that names the method and the field (or the implementation)."""
    with pytest.raises(TypeError) as err:
        _declare(field, impl, name="my_method")
    msg = str(err.value)
    assert msg.startswith("method 'my_method': ") and fragment in msg, msg
    assert ("settings field 'x'" in msg) != ("implementation" in msg), msg


def test_checking_an_implementation_target_imports_no_torch():
    code = ("import sys; from intact.registry import target_problem; "
            "assert target_problem('intact.methods.shared.prompt:PromptMethod') is None; "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_default_of_the_wrong_type_is_refused_where_it_is_declared():
    """setting("32") on an int field: a TypeError at declaration naming the field, for a method as for a benchmark
    type (before, it passed and failed later with "not all arguments converted"); a benchmark's placeholders
    (a required data root, ``domains: ()``) are checked for their type only."""
    from intact.data.declare import BenchmarkSettings, BenchmarkType

    S = dataclasses.make_dataclass("S", [("batch", int, setting("32", "a batch size"))], frozen=True)
    with pytest.raises(TypeError, match="method 'm': settings field 'batch': default '32' breaks its own "
                                        "declaration: '32' is not of type 'integer'"):
        Method("m", S, IMPL, "a method")
    B = dataclasses.make_dataclass("B", [("size", int, setting("32", "image side"))], bases=(BenchmarkSettings,),
                                   frozen=True)
    with pytest.raises(TypeError, match="benchmark 'b': settings field 'size': default '32' breaks"):
        BenchmarkType("b", B, "intact.data.image_benchmark:ImageBenchmark", "a benchmark", tasks=("a",), num_classes=2)
    R = dataclasses.make_dataclass("R", [("root", str, setting("", "data root", minLength=1)),
                                         ("domains", tuple[str, ...], setting((), "tasks", minItems=1))],
                                   bases=(BenchmarkSettings,), frozen=True)
    BenchmarkType("r", R, "intact.data.image_benchmark:ImageBenchmark", "a benchmark", tasks=("a",), num_classes=2,
                  required=("root",))
    shared = dataclasses.make_dataclass("Shared", [("root", str, setting("", "data root", settable=False))],
                                        bases=(BenchmarkSettings,), frozen=True)
    with pytest.raises(TypeError, match=r"benchmark 'r': required \['root'\] are not settable keys of Shared"):
        BenchmarkType("r", shared, "intact.data.image_benchmark:ImageBenchmark", "b", tasks=("a",), num_classes=2,
                      required=("root",))
    bad = dataclasses.make_dataclass("Bad", [("root", str, setting(0, "data root"))], bases=(BenchmarkSettings,),
                                     frozen=True)
    with pytest.raises(TypeError, match="settings field 'root': default 0 breaks"):
        BenchmarkType("r", bad, "intact.data.image_benchmark:ImageBenchmark", "b", tasks=("a",), num_classes=2,
                      required=("root",))


def test_a_hook_with_the_wrong_signature_is_refused_naming_the_hook_and_the_signature():
    S = dataclasses.make_dataclass("S", [("x", float, setting(1.0))], frozen=True)
    with pytest.raises(TypeError) as err:
        Method("m", S, IMPL, "a method", check=one_argument)
    assert str(err.value) == ("method 'm': hook test_declarations.one_argument(settings) does not fit the signature "
                              "check(settings, benchmark, backbone) -> [(key, problem), ...]"), err.value
    with pytest.raises(TypeError, match=r"implementation test_declarations.make is a function; removed in version "
                                        r"0.2.0: name a module-level class as 'package.module:Class'"):
        Method("m", S, make, "a method")   # the form of 0.1 (a function returning the class)
    from intact.data.declare import BenchmarkSettings, BenchmarkType

    with pytest.raises(TypeError, match=r"benchmark 'b': hook .* does not fit the signature check\(settings\) -> "):
        BenchmarkType("b", BenchmarkSettings, IMPL, "b", tasks=("a",), num_classes=2, check=lambda: [])


def make(name):
    return None


def one_argument(settings):
    return []


def test_a_two_argument_check_the_documented_form_of_9cca412_is_refused_naming_its_replacement():
    """check(settings, benchmark) was docs/adding-a-method.md's signature from 9cca412 until 74f1914 (2026-11-26),
    accepted with a warning until version 0.2.0, which refuses it in one line naming the three-argument form."""
    S = dataclasses.make_dataclass("S", [("x", float, setting(1.0))], frozen=True)

    def check(s, bench):
        yield "x", "too large"

    msg = str(pytest.raises(TypeError, Method, "old", S, IMPL, "a method", check=check, uses_backbone=False).value)
    assert "\n" not in msg and msg.startswith("method 'old': hook test_declarations") and (
        "removed in version 0.2.0: the two-argument check(settings, benchmark) is check(settings, benchmark, "
        "backbone)") in msg, msg
