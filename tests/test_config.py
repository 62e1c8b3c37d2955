"""Config validation: bad input stops with a message naming the key / file and what was expected."""

import copy
import os
import re
from pathlib import Path

import pytest

from conftest import assert_config_error, tiny_config
from intact.config import ConfigError, RunConfig, resolve_run, run_from_dict, validate_config
from intact.naming import NAME_PATTERN, MethodNameError, parse_method_name


def test_default_and_tiny_config_are_valid():
    from conftest import REPO
    from intact.config import load_config

    load_config(REPO / "config.yaml")
    validate_config(tiny_config())


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
    (lambda c: c["benchmarks"]["digits"].update(type="mnist"), ["benchmarks.digits.type", "mnist", "digits"]),
    (lambda c: c["benchmarks"]["digits"].update(domains=["blur", "fogg"]), ["domains[1]", "fogg"]),
    (lambda c: c["backbones"]["vit_digits"].update(weights="/nonexistent/vit.safetensors"), ["backbones.vit_digits.weights", "/nonexistent/vit.safetensors", "does not exist"]),
])
def test_bad_input_names_key_and_expectation(mutate, expected):
    assert_config_error(mutate, expected)


def test_method_name_grammar():
    n = parse_method_name("coda_p+intact-no_var-no_align@lambda_feat=1e-3,optim.epochs=2")
    assert (n.base, n.intact, n.disabled) == ("coda_p", True, ("var", "align"))
    assert n.section_overrides() == {"intact": {"lambda_var": 0.0, "lambda_align": 0.0, "lambda_feat": 1e-3}, "optim": {"epochs": 2}}
    assert parse_method_name("coda_p").section_overrides() == {}
    for bad in ["Coda", "coda_p+intact@", "coda_p+intact@x", "coda_p+intact-no_"]:
        with pytest.raises(MethodNameError):
            parse_method_name(bad)


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
    assert resolve_run(other, "digits", "coda_p+intact", 0).hash() != resolve_run(cfg, "digits", "coda_p+intact", 0).hash()
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
    over.write_text(yaml.safe_dump({"run": {"methods": ["c_prompt", "l2p"]}, "methods": {"l2p": {"pool_size": 12}}}))
    layered = read_files([base, over])
    assert layered["run"]["methods"] == ["c_prompt", "l2p"] and layered["methods"]["l2p"] == {"pool_size": 12}
    assert layered["run"]["seeds"] == tiny_config()["run"]["seeds"]   # mappings merge key by key
    assert main(["validate", str(base), str(over)]) == 0
    assert f"{base} <- {over}: valid" in capsys.readouterr().out
    assert main(["runs", str(base), str(over)]) == 0
    run_part = capsys.readouterr().out.split("# study")[0]
    assert "2 methods" in run_part and "digits\tl2p\tseeds=0" in run_part and "digits\tcoda_p\t" not in run_part
    over.write_text(yaml.safe_dump({"run": {"methods": ["c_prompt"]}, "methods": {"c_prompt": {"expert_last": 20}}}))
    assert main(["validate", str(base), str(over)]) == 2
    assert "methods.c_prompt.expert_last' = 20: block 20 does not exist" in capsys.readouterr().err
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
