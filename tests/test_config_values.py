"""No bad value starts a job (issue 43 item 3): a number that is not finite, an integer past 64 bits, an entry
listed twice and a key given twice in a YAML file are each refused at validation, in one line naming the key (and
the file and line where a file says it). The workflow test of the same cases after a finished run:
tests/test_workflow.py::test_bad_values_stop_before_any_job."""

import dataclasses
import re

import pytest

from conftest import REPO, load_tool, tiny_config, write_config
from intact.config import ConfigError, validate_config
from intact.layering import LayerError, load_file, read_layers
from intact.settings import INT_MAX, check_declared, section_schema, setting, validator

NAN, INF = float("nan"), float("inf")


def refusal(mutate) -> str:
    """The one-line message with which the tiny config changed by ``mutate`` is refused."""
    cfg = tiny_config()
    mutate(cfg)
    msg = str(pytest.raises(ConfigError, validate_config, cfg, check_files=False).value)
    assert "\n" not in msg, msg
    return msg


def run_named(name: str):
    return lambda c: c["run"].update(methods=[name])


def tune_search(**search):
    """``studies.tune`` with one search of ``coda_p+intact`` (``search``: its grid or random space)."""
    return lambda c: c["studies"]["tune"].update(searches=[{"run": "coda_p+intact", "baseline": "coda_p", **search}])


FINITE, BITS, TWICE = "not a finite number", "does not fit in 64 bits", "is listed twice; each at most once"
SEED = 2**64


@pytest.mark.parametrize("mutate, fragments", [
    # .nan, .inf and -.inf pass every minimum and maximum: every setting that is a number is finite. In the shared
    # sections, a method's, a benchmark's and a backbone's settings, and the layers over them:
    (lambda c: c["intact"].update(lambda_feat=NAN), ["key 'intact.lambda_feat' = nan", FINITE]),
    (lambda c: c["optim"].update(lr_head=INF), ["key 'optim.lr_head' = inf", FINITE]),
    (lambda c: c["intact"].update(percentile=NAN), ["key 'intact.percentile' = nan", FINITE]),
    (lambda c: c["methods"]["coda_p"].update(ortho_mu=INF), ["key 'methods.coda_p.ortho_mu' = inf", FINITE]),
    (lambda c: c["benchmarks"]["digits"].update(pretrain_fraction=NAN),
     ["key 'benchmarks.digits.pretrain_fraction' = nan", FINITE]),
    (lambda c: c["backbones"]["vit_digits"].update(input_std=[INF]), ["'backbones.vit_digits.input_std[0]'", FINITE]),
    (lambda c: c["backbones"]["vit_digits"]["pretrain"].update(lr=NAN), ["'backbones.vit_digits.pretrain.lr'", FINITE]),
    (lambda c: c["benchmarks"]["digits"]["overrides"].update(intact={"lambda_var": NAN}),
     ["on benchmark 'digits': key 'intact.lambda_var' = nan", FINITE]),
    (lambda c: c.update(protocols={"intact": {"per_method": {"coda_p": {"optim": {"lr_prompt": INF}}}}}),
     ["key 'optim.lr_prompt' = inf", FINITE]),
    # in run names (YAML's spellings, and a float that overflows)
    (run_named("coda_p+intact@lambda_feat=.inf"), ["method 'coda_p+intact@lambda_feat=.inf' on benchmark 'digits': "
                                                   "key 'intact.lambda_feat' = inf", FINITE]),
    (run_named("coda_p+intact@lambda_feat=.nan"), ["key 'intact.lambda_feat' = nan", FINITE]),
    (run_named("coda_p+intact@lambda_feat=1e999"), ["key 'intact.lambda_feat' = inf", FINITE]),
    # in the studies' grids, tune's grids, random spaces and tolerance, the toy and drift experiments
    (lambda c: c["studies"]["sensitivity"]["grid"].update(lambda_feat=[0.1, NAN]),
     ["key 'studies.sensitivity.grid.lambda_feat[1]' = nan", FINITE]),
    (tune_search(grid={"lambda_feat": [1.0, INF]}), ["key 'studies.tune.searches[0].grid.lambda_feat[1]'", FINITE]),
    (tune_search(random={"points": 2, "space": {"lambda_feat": {"uniform": [0.0, INF]}}}),
     ["key 'studies.tune.searches[0].random.space.lambda_feat.uniform[1]' = inf", FINITE]),
    (tune_search(random={"points": 2, "space": {"lambda_feat": {"choice": [1.0, NAN]}}}),
     ["key 'studies.tune.searches[0].random.space.lambda_feat.choice[1]' = nan", FINITE]),
    (lambda c: c["studies"]["tune"].update(tolerance=NAN), ["key 'studies.tune.tolerance' = nan", FINITE]),
    (lambda c: c["experiments"]["toy"].update(lr=INF), ["key 'experiments.toy.lr' = inf", FINITE]),
    (lambda c: c["experiments"]["drift"].update(percentile=NAN), ["key 'experiments.drift.percentile' = nan", FINITE]),
    # a seed is 0 to 2^63 - 1 (a pretraining seed of 2^64 overflowed torch's generator in the job, and Snakemake
    # then deleted the good backbone); so is any integer of a config
    (lambda c: c["backbones"]["vit_digits"]["pretrain"].update(seed=SEED),
     ["key 'backbones.vit_digits.pretrain.seed' = 18446744073709551616", BITS]),
    (lambda c: c["backbones"]["vit_digits"]["pretrain"].update(seed=INT_MAX + 1),
     ["key 'backbones.vit_digits.pretrain.seed'", BITS]),
    (lambda c: c["run"].update(seeds=[SEED]), ["key 'run.seeds[0]'", BITS]),
    (lambda c: c["studies"].update(seeds=[0, SEED]), ["key 'studies.seeds[1]'", BITS]),
    (lambda c: c["studies"]["main"].update(seeds=[SEED]), ["key 'studies.main.seeds[0]'", BITS]),
    (lambda c: c["studies"]["tune"].update(seeds=[SEED]), ["key 'studies.tune.seeds[0]'", BITS]),
    (lambda c: c["studies"]["tune"].update(selection_seeds=[0, SEED]), ["key 'studies.tune.selection_seeds[1]'", BITS]),
    (tune_search(random={"points": 2, "seed": SEED, "space": {"lambda_feat": {"choice": [1.0, 2.0]}}}),
     ["key 'studies.tune.searches[0].random.seed'", BITS]),
    (lambda c: c["experiments"]["toy"].update(seed=SEED), ["key 'experiments.toy.seed'", BITS]),
    (lambda c: c["experiments"]["drift"].update(seeds=[SEED]), ["key 'experiments.drift.seeds[0]'", BITS]),
    (lambda c: c["optim"].update(epochs=SEED), ["key 'optim.epochs'", BITS]),
    # an integer setting written as a float passes JSON Schema's "integer" (2.0 is one), then fails in the job
    (lambda c: c["optim"].update(epochs=2.0), ["key 'optim.epochs' = 2.0: an integer is written without a decimal"]),
    (run_named("coda_p@optim.epochs=2.0"), ["key 'optim.epochs' = 2.0: an integer is written without a decimal"]),
    (lambda c: c["run"].update(seeds=[1.0]), ["key 'run.seeds[0]' = 1.0: an integer is written without a decimal"]),
    # a domain twice re-prepared the shared data and trained, and the reports then failed as if R.csv were damaged:
    # every benchmark type's ``domains`` takes each task once (derived: intact.data.declare); terms and seeds too
    (lambda c: c["benchmarks"]["digits"].update(domains=["blur", "noise", "blur"]),
     ["config: key 'benchmarks.digits.domains' = ['blur', 'noise', 'blur']: 'blur' " + TWICE]),
    (lambda c: c["studies"]["ablation"].update(terms=["var", "feat", "var"]), ["'var' " + TWICE]),
    (lambda c: c["experiments"]["drift"].update(seeds=[0, 1, 0]), ["key 'experiments.drift.seeds'", TWICE]),
])
def test_bad_values_are_refused(mutate, fragments):
    msg = refusal(mutate)
    assert all(f in msg for f in fragments), msg


def test_the_largest_seed_passes_and_a_split_seed_is_bounded_by_what_scikit_learn_takes():
    cfg = tiny_config()
    cfg["run"]["seeds"] = [INT_MAX]
    cfg["backbones"]["vit_digits"]["pretrain"]["seed"] = INT_MAX
    validate_config(cfg, check_files=False)
    msg = refusal(lambda c: c["benchmarks"]["digits"].update(split_seed=2**32))
    assert "key 'benchmarks.digits.split_seed' = 4294967296" in msg and "maximum of 4294967293" in msg, msg


@dataclasses.dataclass(frozen=True)
class Clipped:
    clip: float = setting(1.0, "a clip threshold", minimum=0)
    limit: float = setting(INF, "no limit: .inf", minimum=0, finite=False)


@dataclasses.dataclass(frozen=True)
class NanDefault:
    weight: float = setting(NAN, "a weight")


def test_a_declaration_may_allow_a_number_that_is_not_finite_and_its_default_is_checked():
    check_declared(Clipped, "Clipped")
    errors = list(validator(section_schema(Clipped)).iter_errors({"clip": INF, "limit": INF}))
    assert [(list(e.absolute_path), e.message.split(" (")[0]) for e in errors] == [(["clip"], "not a finite number")]
    with pytest.raises(TypeError, match=r"field 'weight': default nan breaks its own declaration: not a finite number"):
        check_declared(NanDefault, "NanDefault")


def validate_files(capsys, *files) -> str:
    """``intact validate`` on ``files``: its one line on stderr (it refuses them)."""
    from intact.cli import main

    assert main(["validate", *map(str, files)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_a_key_given_twice_is_refused(tmp_path, capsys):
    """YAML keeps the last of two equal keys silently (a second ``optim:`` block dropped the first): the one loader
    refuses it, at any depth, in a list of mappings and in an ``extends`` base; ``<<`` merges still override."""
    write_config(tmp_path, tiny_config())
    over = tmp_path / "over.yaml"
    over.write_text("optim:\n  epochs: 2\nintact: {}\noptim:\n  lr_head: 0.02\n")
    assert validate_files(capsys, tmp_path / "config.yaml", over) == (
        f"error: config file '{over}', line 4: key 'optim' is given twice in one mapping (first on line 1); YAML "
        "would keep only the last, silently")
    over.write_text("studies:\n  tune:\n    searches:\n      - run: coda_p\n        grid: {lambda_feat: [1]}\n"
                    "        run: l2p\n")
    assert "line 6: key 'studies.tune.searches[0].run' is given twice" in validate_files(capsys, over)
    over.write_text("methods: {coda_p: {length: 8}, l2p: {}, coda_p: {pool_size: 10}}\n")
    assert "line 1: key 'methods.coda_p' is given twice" in validate_files(capsys, over)
    base = tmp_path / "base.yaml"
    base.write_text("run:\n  seeds: [0]\n  seeds: [1]\n")
    over.write_text("extends: base.yaml\n")
    msg = str(pytest.raises(LayerError, read_layers, over).value)
    assert msg.startswith(f"config file '{base}', line 3: key 'run.seeds' is given twice"), msg
    over.write_text("a: {1: x, 1.0: y}\n")
    assert "key 'a.1.0' is given twice" in str(pytest.raises(LayerError, load_file, over).value)
    over.write_text("base: &b {epochs: 2, lr_head: 0.1}\noptim: {<<: *b, epochs: 3}\n")
    assert load_file(over)["optim"] == {"epochs": 3, "lr_head": 0.1}


@pytest.mark.parametrize("text, expected", [
    ("optim: [\n  epochs: 3\n", "not valid YAML: while parsing a flow sequence: did not find expected ',' or ']' "
                                "(line 3, column 1)"),
    (f"run:\n  seeds: [{'9' * 5000}]\n", "a value cannot be read: Exceeds the limit (4300 digits)"),
    # libyaml's parser stops at 1,000 levels; Python's (where libyaml is not installed) at its recursion limit
    ("run: {methods: " + "[" * 2000 + "]" * 2000 + "}\n", "nest"),
])
def test_unreadable_yaml_is_refused(tmp_path, capsys, text, expected):
    (tmp_path / "bad.yaml").write_text(text)
    msg = validate_files(capsys, tmp_path / "bad.yaml")
    assert msg.startswith(f"error: config file '{tmp_path / 'bad.yaml'}': ") and expected in msg, msg


def test_every_yaml_file_the_package_reads_goes_through_the_one_loader():
    """``intact.layering.load_file`` (and, for a run name's value, ``load_text``): no other YAML reader, in the
    package, the workflow or the tools."""
    readers = re.compile(r"yaml\.(safe_load|load|full_load|unsafe_load|compose|load_all|safe_load_all)\(")
    sources = [*(REPO / "src/intact").rglob("*.py"), *(REPO / "workflow").rglob("*.py"),
               *(REPO / "workflow").rglob("*.smk"), REPO / "Snakefile", *(REPO / "tools").glob("*.py")]
    found = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in sources if p.name != "layering.py"
             for m in readers.finditer(p.read_text())]
    assert found == []


@pytest.mark.slow
def test_no_value_in_place_of_a_run_name_or_any_other_value_of_run_and_studies_escapes_validation():
    """``tools/settings_fuzz.py validation`` cut to the sections that hold run names (~500 configs, ~10 s): each value,
    list and mapping of ``run`` and ``studies`` replaced by a string, by null and, at a string, by names that do not
    parse, is refused as a ConfigError or accepted. A study's name that did not parse escaped as a traceback before
    2026-11-30; the tool's full run covers every section (docs/log/2026-11-30-settings-fuzz.md)."""
    fuzz = load_tool("settings_fuzz")
    count, escaped = fuzz.fuzz_validation(fuzz.filled(str(REPO / "config.yaml")), ["x", None],
                                          names=["", "coda_p@x", "coda_p+intact+intact"], sections=("run", "studies"),
                                          check=lambda cfg: validate_config(cfg, check_files=False))
    assert count > 400 and not escaped, escaped
