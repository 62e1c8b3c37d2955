"""Config validation: bad input stops with a message naming the key / file and what was expected."""

import copy
import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, assert_config_error, snakemake, tiny_config, write_config
from intact.layering import LayerError, load_file, read_layers
from intact.config import ConfigError, load_config, resolve_run, run_from_dict, validate_config
from intact.naming import NAME_PATTERN, MethodNameError, parse_method_name


def test_default_and_tiny_config_are_valid():
    from conftest import REPO
    from intact.config import load_config

    load_config(REPO / "config.yaml")
    validate_config(tiny_config())


@pytest.mark.parametrize("extra", [(), pytest.param(("configs/paper/imagenet_r.yaml",), marks=pytest.mark.slow)])
def test_validation_returns_the_runs_the_workflow_uses(extra):
    """Every declared run that validation resolves, at another seed by ``dataclasses.replace`` (what the workflow's
    common.smk does), equals the run resolved at that seed: the same settings and hash."""
    from intact.plan import Plan

    cfg = load_config(REPO / "config.yaml", *(REPO / e for e in extra), check_files=False)
    runs = validate_config(cfg, check_files=False)
    assert runs and all(r.seed == cfg["run"]["seeds"][0] for r in runs.values())
    declared = Plan(cfg).declared_runs()
    checked = 0
    for b, methods in declared.items():
        for m, seeds in methods.items():
            for s in seeds if (b, m) in runs else ():
                again = resolve_run(cfg, b, m, s)
                assert dataclasses.replace(runs[(b, m)], seed=s) == again and again.hash() == \
                    dataclasses.replace(runs[(b, m)], seed=s).hash()
                checked += 1
    assert checked >= len(runs) // 2


@pytest.mark.parametrize("mutate, expected", [
    (lambda c: c["optim"].update(lr_hed=1.0), ["optim.lr_hed", "lr_head"]),
    (lambda c: c.update(optimm={}), ["optimm", "optim"]),
    (lambda c: c["optim"].update(epochs="five"), ["optim.epochs", "five", "integer"]),
    (lambda c: c["intact"].update(lambda_var=-1), ["intact.lambda_var", "minimum"]),
    (lambda c: c["run"].update(methods=["coda_q"]), ["coda_q", "coda_p"]),
    (lambda c: c["run"].update(methods=["coda_p-no_var"]), ["+intact"]),
    (lambda c: c["run"].update(methods=["coda_p+intact-no_drift"]), ["no_drift", "no_intdrift"]),
    (lambda c: c["run"].update(methods=["coda_p+intact@lambda_vr=1"]), ["lambda_vr"]),
    (lambda c: c["run"].update(methods=["coda_p+intact@lambda_var=abc"]), ["intact.lambda_var", "abc"]),
    (lambda c: c["run"].update(benchmarks=["imagenet_r"]), ["imagenet_r", "digits"]),
    # a study's name that does not parse: one line naming the study (a MethodNameError traceback before 2026-11-30)
    (lambda c: c["studies"]["main"].update(methods=["coda_p@x"]),
     ["'coda_p@x'", "key=value", "declared in studies.main"]),
    (lambda c: c["studies"]["main"].update(methods=[""]), ["method name ''", "declared in studies.main"]),
    (lambda c: c["studies"]["integration"].update(methods=["coda_p+intact"]),
     ["already has '+intact'", "declared in studies.integration"]),
    (lambda c: c["studies"]["ablation"].update(method="coda_p@x"),
     ["'coda_p@x", "key=value", "declared in studies.ablation"]),
    (lambda c: c["benchmarks"]["digits"].update(type="mnist"), ["benchmarks.digits.type", "mnist", "digits"]),
    (lambda c: c["benchmarks"]["digits"].update(domains=["blur", "fogg"]), ["domains[1]", "fogg"]),
    (lambda c: c["benchmarks"]["digits"].update(test_fraction=0.999),  # scikit-learn's error in the prepare job before
     ["'benchmarks.digits.test_fraction' = 0.999", "into 1077 taken and 1 kept", "at least 10 on each side"]),
    (lambda c: c["backbones"]["vit_digits"].update(weights="/nonexistent/vit.safetensors"),
     ["backbones.vit_digits.weights", "/nonexistent/vit.safetensors", "does not exist"]),
])
def test_bad_input_names_key_and_expectation(mutate, expected):
    assert_config_error(mutate, expected)


def _tune_only_backbone(cfg, **backbone):
    cfg["backbones"]["vit2"] = {"model": "vit_digits_p8", **backbone}
    cfg["benchmarks"]["digits_3"]["backbone"] = "vit2"


@pytest.mark.parametrize("mutate, expected", [
    (lambda c: c["benchmarks"]["digits_3"].update(test_fraction=0.999),
     ["'benchmarks.digits_3.test_fraction' = 0.999", "at least 10 on each side"]),
    (lambda c: c["studies"]["tune"].update(benchmarks=["digits_9"]),
     ["key 'studies.tune.benchmarks' names unknown benchmark 'digits_9'"]),
    (lambda c: _tune_only_backbone(c, weights="/nonexistent/vit.safetensors"),
     ["key 'backbones.vit2.weights'", "does not exist"]),
    (lambda c: _tune_only_backbone(c, weights="pretrain", pretrain={"benchmark": "digits_9"}),
     ["key 'backbones.vit2.pretrain.benchmark' = 'digits_9' is not defined"]),
    # the benchmark that pretrains a backbone is prepared (rule prepare_data) though no run trains on it
    (lambda c: (c["run"].update(benchmarks=["digits_3"]), c["benchmarks"]["digits"].update(pretrain_fraction=0.999)),
     ["'benchmarks.digits.pretrain_fraction' = 0.999", "into 1796 taken and 1 kept"]),
    (lambda c: (c["run"].update(benchmarks=["digits_3"]), c["benchmarks"]["digits"].update(test_fraction=0.999)),
     ["'benchmarks.digits.test_fraction' = 0.999", "into 1077 taken and 1 kept"]),
    # an image-only optim setting reaches the tune's runs on digits_3 too (the job refused it)
    (lambda c: c["benchmarks"]["digits_3"]["overrides"]["optim"].update(test_resize=64),
     ["'optim.test_resize' = 64", "benchmark 'digits_3' (type 'digits') has no prepared images", "studies.tune"]),
])
def test_the_tune_s_benchmarks_and_a_pretraining_source_are_checked_too(mutate, expected):
    """Before 2026-12-01 only ``run.benchmarks`` were: a benchmark that only studies.tune trains on, or that only
    pretrains a backbone, passed validation with settings its prepare job refused in scikit-learn's words, and a
    tune-only benchmark's backbone was not checked at all (its missing weights file or pretraining source ended the
    real run in Snakemake's missing-input error)."""
    assert_config_error(mutate, expected)


@pytest.mark.parametrize("batch, eval_split, where", [(647, "test", "run.methods"), (517, "val", "run.methods"),
                                                      (517, "test", "studies.tune")])
def test_a_batch_larger_than_a_digits_task_with_drop_last_is_refused(batch, eval_split, where):
    """Digits' splits are sized without the data (646 training images a task; 516 without the validation part, on
    which the tune's search points train), so validation refuses a batch that takes no step where ``drop_last``
    drops it; before 2026-12-01 the job refused it, after building its run."""
    from intact.data.digits import BenchmarkConfig

    bench = BenchmarkConfig(name="d", type="digits", backbone="b")
    assert (bench.train_images("test"), bench.train_images("val")) == (646, 516)
    cfg = tiny_config()
    if where != "studies.tune":
        del cfg["studies"]["tune"]   # its search points train on 516 images
    cfg["optim"].update(drop_last=True, batch_size=batch - 1)
    cfg["run"]["eval_split"] = eval_split
    validate_config(cfg)
    cfg["optim"]["batch_size"] = batch
    with pytest.raises(ConfigError, match=rf"'optim.batch_size' = {batch}: more than the {batch - 1} training images "
                       rf".* so no step would be taken.*declared in {where}"):
        validate_config(cfg)
    cfg["optim"]["drop_last"] = False
    validate_config(cfg)


def test_method_name_grammar():
    n = parse_method_name("coda_p+intact-no_var-no_align@lambda_feat=1e-3,optim.epochs=2")
    assert (n.base, n.intact, n.disabled) == ("coda_p", True, ("var", "align"))
    assert n.section_overrides() == {"intact": {"lambda_var": 0.0, "lambda_align": 0.0, "lambda_feat": 1e-3},
                                     "optim": {"epochs": 2}}
    assert parse_method_name("coda_p").section_overrides() == {}
    for bad in ["Coda", "coda_p+intact@", "coda_p+intact@x", "coda_p+intact-no_"]:
        with pytest.raises(MethodNameError):
            parse_method_name(bad)


@pytest.mark.parametrize("name, message", [
    ("coda_p+intact-no_var@lambda_var=0.5", "'lambda_var=0.5' sets 'intact.lambda_var', which '-no_var' sets already"),
    ("coda_p+intact@lambda_var=1,intact.lambda_var=2", "'intact.lambda_var=2' sets 'intact.lambda_var', which "
                                                       "'lambda_var=1' sets already"),
    ("coda_p@optim.epochs=1,optim.epochs=2", "'optim.epochs=2' sets 'optim.epochs', which 'optim.epochs=1' sets "
                                             "already"),
])
def test_a_name_sets_each_setting_once(name, message):
    """Before 2026-11-30 the last value silently won: ``-no_var@lambda_var=0.5`` trained with L_Var on, so an
    ablation study of a method with a λ in its name listed the full method as that term's ablation, and a tune grid
    over a key the run's name set (``run.eval_split`` included) made points whose names said one value and whose
    runs used another."""
    with pytest.raises(MethodNameError, match=re.escape(message) + r" \(one value per setting\)"):
        parse_method_name(name)
    cfg = tiny_config()
    cfg["studies"]["ablation"]["method"] = "coda_p+intact@lambda_var=0.5"
    with pytest.raises(ConfigError, match=r"'-no_var' sets already .*declared in studies.ablation"):
        validate_config(cfg, check_files=False)
    cfg = tiny_config()
    cfg["studies"]["tune"]["searches"] = [{"run": "coda_p+intact", "grid": {"run.eval_split": ["val", "test"]}}]
    with pytest.raises(ConfigError, match=r"'run.eval_split=val' sets 'run.eval_split', .*declared in studies.tune"):
        validate_config(cfg, check_files=False)


def test_parsed_names_and_type_hints_are_kept_without_changing_what_they_say():
    """Validation parses each run's name several times and builds each settings section once per run: both are
    kept (intact.naming, intact.settings.fields.type_hints). A kept answer equals a fresh one; a bad name is refused
    every time (a refusal is not kept); a name that is not a string is refused as such, not as unhashable."""
    import typing

    from intact.naming import _parse_name_uncached
    from intact.settings.fields import type_hints
    from intact.settings.sections import OptimConfig

    name = "coda_p+intact-no_var@lambda_feat=1e-3,optim.epochs=2"
    assert parse_method_name(name) is parse_method_name(name) == _parse_name_uncached(name)
    for _ in range(2):
        with pytest.raises(MethodNameError, match="unknown InTAct term"):
            parse_method_name("coda_p+intact-no_varr")
    with pytest.raises(MethodNameError, match="does not follow"):
        parse_method_name(["coda_p"])
    hints = type_hints(OptimConfig)
    assert dict(hints) == {f: t for f, t in typing.get_type_hints(OptimConfig).items() if f in hints}
    assert list(hints) == [f.name for f in dataclasses.fields(OptimConfig)]
    with pytest.raises(TypeError):
        hints["epochs"] = str  # read-only: every caller sees the same answer
    # validating twice resolves every run to the same settings
    cfg = tiny_config()
    first = resolve_run(cfg, "digits", "coda_p+intact@lambda_feat=3", 0)
    validate_config(cfg)
    assert resolve_run(cfg, "digits", "coda_p+intact@lambda_feat=3", 0) == first


@pytest.mark.parametrize("name, shown", [
    ("coda_p+intact@lambda_var=0.1 ", "' ' at position 28"), ("coda_p\n", "'\\n' at position 6"),
    ("coda_p+intact\r", "'\\r' at position 13"), ("coda_p\t+intact", "'\\t' at position 6"),
    ("coda_p\x00", "'\\x00' at position 6"), ("coda_p\u200b", "'\\u200b' at position 6"),
])
def test_a_name_is_matched_whole_whitespace_and_control_characters_refused(name, shown):
    """One pattern (naming.NAME_PATTERN, the Snakemake wildcard's) matched over the whole name: ``$`` before a
    final newline and a trailing space no longer pass validation."""
    cfg = tiny_config()
    cfg["run"]["methods"] = ["coda_p", name]
    msg = str(pytest.raises(ConfigError, validate_config, cfg).value)
    assert "\n" not in msg and f"method name {name!r} does not follow" in msg and f"it has {shown}" in msg, msg
    assert re.fullmatch(NAME_PATTERN, name) is None


def test_a_long_name_is_refused_with_an_excerpt():
    name = "coda_p@optim.epochs=" + "1" * 5000
    msg = str(pytest.raises(MethodNameError, parse_method_name, name).value)
    assert len(msg) < 300 and "5020 characters; at most 200" in msg, msg


@pytest.mark.parametrize("kind, said", [
    ("missing", "does not exist"), ("directory", "is a directory, not a file"),
    ("fifo", "is not a regular file"), ("unreadable", "cannot be read (no read permission)"),
    ("dangling", "does not exist (a broken symbolic link to "),
])
def test_a_weights_path_is_named_precisely(tmp_path, monkeypatch, kind, said):
    path = tmp_path / "vit.safetensors"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "unreadable":
        path.write_bytes(b"x")
        path.chmod(0)
        if os.geteuid() == 0:  # root reads anything: the same check, told that it may not
            monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != path)
    elif kind == "dangling":
        path.symlink_to(tmp_path / "gone")
    cfg = tiny_config()
    cfg["backbones"]["vit_digits"]["weights"] = str(path)
    msg = str(pytest.raises(ConfigError, validate_config, cfg).value)
    assert f"key 'backbones.vit_digits.weights': weights file '{path}' {said}" in msg and "\n" not in msg, msg


def test_resolved_run_merges_overrides_and_round_trips():
    cfg = tiny_config()
    cfg["benchmarks"]["digits"]["overrides"] = {"intact": {"lambda_feat": 0.5}, "optim": {"epochs": 3}}
    run = resolve_run(cfg, "digits", "coda_p+intact-no_var@lambda_intdrift=1e-4", 2)
    assert run.intact.lambda_feat == 0.5 and run.intact.lambda_var == 0.0 and run.intact.lambda_intdrift == 1e-4
    assert run.optim.epochs == 3 and run.seed == 2 and run.base == "coda_p"
    assert run_from_dict(run.to_dict()) == run
    assert resolve_run(cfg, "digits", "coda_p", 2).intact is None
    other = copy.deepcopy(cfg)
    other["intact"]["lambda_align"] = 0.5
    # a change in the intact section changes +intact runs' hashes, not plain runs'
    changed, same = (resolve_run(c, "digits", "coda_p+intact", 0).hash() for c in (other, cfg))
    assert changed != same
    assert resolve_run(other, "digits", "coda_p", 0).hash() == resolve_run(cfg, "digits", "coda_p", 0).hash()


def test_cli_validates_and_lists_runs(tmp_path, capsys):
    import yaml

    from intact.cli import main

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(tiny_config()))
    assert main(["validate", str(path)]) == 0
    assert main(["runs", str(path)]) == 0
    assert "digits\tcoda_p+intact\tseeds=0" in capsys.readouterr().out
    bad = tiny_config()
    bad["optim"]["epochz"] = 1
    path.write_text(yaml.safe_dump(bad))
    assert main(["validate", str(path)]) == 2
    assert "optim.epochz" in capsys.readouterr().err


def test_cli_layers_several_files_as_snakemake_does(tmp_path, capsys):
    """``intact validate a.yaml b.yaml`` checks what ``snakemake --configfile b.yaml`` runs over ``a.yaml``:
    an overlay valid alone may be refused with its base, and the runs listed are the layered config's."""
    import yaml

    from intact.cli import main
    from intact.layering import read_files

    base, over = tmp_path / "base.yaml", tmp_path / "over.yaml"
    base.write_text(yaml.safe_dump(tiny_config()))
    over.write_text(yaml.safe_dump({"run": {"methods": ["compositional_prompt", "l2p"]},
                                    "methods": {"l2p": {"pool_size": 12}}}))
    layered = read_files([base, over])
    assert layered["run"]["methods"] == ["compositional_prompt", "l2p"]
    assert layered["methods"]["l2p"] == {"pool_size": 12}
    assert layered["run"]["seeds"] == tiny_config()["run"]["seeds"]   # mappings merge key by key
    assert main(["validate", str(base), str(over)]) == 0
    assert f"{base} <- {over}: valid" in capsys.readouterr().out
    assert main(["runs", str(base), str(over)]) == 0
    run_part = capsys.readouterr().out.split("# study")[0]
    assert "2 methods" in run_part and "digits\tl2p\tseeds=0" in run_part and "digits\tcoda_p\t" not in run_part
    over.write_text(yaml.safe_dump({"run": {"methods": ["compositional_prompt"]},
                                    "methods": {"compositional_prompt": {"expert_last": 20}}}))
    assert main(["validate", str(base), str(over)]) == 2
    assert "methods.compositional_prompt.expert_last' = 20: block 20 does not exist" in capsys.readouterr().err
    assert main(["validate", str(base), str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml' does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("sections", [
    {"optim": {"lr": -1.0}},
    {"optim": {"lr_hed": 0.1}},
    {"intact": {"lambda_feat": "big"}},
    {"head": {"bias": 3}},
])
def test_a_run_s_sections_are_refused_as_the_whole_config_would_refuse_them(sections):
    """A run's merged sections are validated on their own (schema.check_sections): the same message as
    validating a whole config that holds them; a bad section is refused every time (only valid ones are
    remembered), and valid ones pass."""
    from intact.schema import check_schema, check_sections

    whole = copy.deepcopy(tiny_config())
    for name, values in sections.items():
        whole[name].update(values)
    with pytest.raises(ConfigError) as full:
        check_schema(whole, where="w")
    for _ in range(2):
        with pytest.raises(ConfigError) as part:
            check_sections({name: whole[name] for name in sections}, where="w")
        assert str(part.value) == str(full.value)
    check_sections({name: tiny_config()[name] for name in sections}, where="w")


def test_a_bad_override_in_a_method_name_is_refused_with_the_run_named():
    cfg = tiny_config()
    with pytest.raises(ConfigError, match=r"method 'coda_p@optim.lr=-1' on benchmark 'digits'.*optim.lr"):
        resolve_run(cfg, "digits", "coda_p@optim.lr=-1", 0)


#: the "billion laughs" shape: nine levels of ten aliases, 1.1e9 strings once expanded, under a known key
BOMB = "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 10) if p else ', '.join(['lol'] * 10)}]\n"
               for p, c in zip([None, *"abcdefgh"], "abcdefghi")) + "run: {methods: *i}\n"


def refused_quickly(tmp_path: Path, *files: Path) -> str:
    """``intact validate`` on ``files`` in a subprocess: its one-line refusal; it took under 5 s (its own clock) and
    500 MB (resource.getrusage of a small launcher's children: a process started straight from this one would
    report this process's peak, which Linux carries across fork and exec)."""
    inner = ("import sys, time; from intact.cli import main; t = time.monotonic(); rc = main(sys.argv[1:]); "
             "print(rc, time.monotonic() - t)")
    launcher = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
                "print(p.stdout.strip(), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
                "print(p.stderr, end='', file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", launcher, sys.executable, "-c", inner, "validate", *map(str, files)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    rc, took, rss_kb = proc.stdout.split()
    assert rc == "2" and float(took) < 5 and int(rss_kb) < 500 * 1024, (rc, took, rss_kb)
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc.stderr.strip()


def test_an_alias_bomb_and_a_million_seeds_are_refused_in_one_line(tmp_path):
    write_config(tmp_path, tiny_config())
    (tmp_path / "bomb.yaml").write_text(BOMB)
    msg = refused_quickly(tmp_path, tmp_path / "config.yaml", tmp_path / "bomb.yaml")
    assert msg == (f"error: config file '{tmp_path / 'bomb.yaml'}': key 'run.methods' holds at least 1,111,111,110 "
                   "values (YAML aliases counted as often as they repeat); a config holds at most 100,000"), msg
    seeds = tmp_path / "seeds.yaml"
    seeds.write_text(f"run:\n  seeds: [{', '.join(map(str, range(10**6)))}]\n")
    msg = refused_quickly(tmp_path, tmp_path / "config.yaml", seeds)
    assert msg == (f"error: config file '{seeds}' has {seeds.stat().st_size:,} bytes; at most 262,144 "
                   "(a config is a few kilobytes)"), msg
    # the same config built in code (or merged by Snakemake from --config): bounded before the schema walks it
    cfg = tiny_config()
    cfg["run"]["seeds"] = list(range(10**6))
    msg = str(pytest.raises(ConfigError, validate_config, cfg).value)
    assert msg.startswith("config: key 'run.seeds' holds at least 1,000,000 values"), msg
    cfg["run"]["seeds"] = yaml.safe_load(BOMB)["i"]
    msg = str(pytest.raises(ConfigError, validate_config, cfg).value)
    assert "key 'run.seeds' holds at least 1,111,111,110 values" in msg


def test_an_alias_inside_its_anchor_and_deep_nesting_are_refused(tmp_path):
    (tmp_path / "self.yaml").write_text("run: {methods: &m [coda_p, *m]}\n")
    assert "a list or mapping holds itself" in str(pytest.raises(LayerError, read_layers, tmp_path / "self.yaml").value)
    (tmp_path / "deep.yaml").write_text("run: {methods: " + "[" * 40 + "]" * 40 + "}\n")
    assert "nest 42 deep; at most 32" in str(pytest.raises(LayerError, read_layers, tmp_path / "deep.yaml").value)
    # config.yaml's own anchor (the tune grids) is fine
    load_file(REPO / "config.yaml")


@pytest.mark.parametrize("mutate, expected", [
    (lambda c: c["run"].update(seeds=list(range(101))),
     "config: key 'run.seeds' = [0, 1, 2, 3, 4, 5, ...]: 101 entries; at most 100"),
    (lambda c: c["run"].update(methods=[f"coda_p@optim.epochs={i}" for i in range(1, 502)]),
     "501 entries; at most 500"),
    (lambda c: c.update(studies={}) or c["run"].update(seeds=list(range(100)),
                                                       methods=[f"coda_p@optim.epochs={i}" for i in range(1, 102)]),
     "config: it declares 10,100 runs (benchmark x method x seed, studies and studies.tune included); at most 10,000"),
    (lambda c: c.setdefault("studies", {}).update(tune={"selection_seeds": [0, 1],
                                                        "searches": [{"run": "coda_p+intact", "grid": {
        f"lambda_{t}": [float(v) for v in range(1, 101)] for t in ("var", "feat", "align", "intdrift")}}]}),
     "config: it declares 200,000,106 runs"),   # the search's points, chosen point and baseline (coda_p)
    (lambda c: c["run"].update(seeds=["x"] * 50 + [0]),
     "config: key 'run.seeds' = ['x', 'x', 'x', 'x', 'x', 'x', ...]: 'x' is listed twice; each at most once"),
])
def test_lists_and_the_run_count_are_bounded(mutate, expected):
    """maxItems on every list of the schema; the declared runs counted (a tune grid's product without expanding
    it) before the plan is built; messages quote an excerpt of a value."""
    cfg = tiny_config()
    mutate(cfg)
    msg = str(pytest.raises(ConfigError, validate_config, cfg, check_files=False).value)
    assert expected in msg and len(msg) < 300, msg


@pytest.mark.slow
def test_snakemake_refuses_a_bomb_before_it_expands(tmp_path):
    """A mapping bomb in config.yaml is refused before Snakemake reads the file (Snakemake's merge would copy its
    10^7 mappings: 75 s and 1.5 GB measured); a list bomb given with --configfile, which Snakemake keeps as one
    shared list, is refused when the Snakefile starts. Nothing is written."""
    levels = ["m0: &m0 {" + ", ".join(f"k{j}: lol" for j in range(10)) + "}"]
    levels += [f"m{i}: &m{i} {{" + ", ".join(f"k{j}: *m{i - 1}" for j in range(10)) + "}" for i in range(1, 7)]
    write_config(tmp_path, tiny_config())
    (tmp_path / "config.yaml").write_text("\n".join(levels) + "\n" + (tmp_path / "config.yaml").read_text())
    proc = snakemake(tmp_path, "-n", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "config file 'config.yaml': key 'm6' holds at least 11,111,110 values" in out, out
    write_config(tmp_path, tiny_config())
    (tmp_path / "bomb.yaml").write_text(BOMB)
    proc = snakemake(tmp_path, "-n", "--configfile", str(tmp_path / "bomb.yaml"), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "key 'run.methods' holds at least 1,111,111,110 values" in out, out
    assert "Traceback" not in out and not (tmp_path / "results").exists()
