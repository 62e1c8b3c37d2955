"""Training behaviour on the tiny benchmark: the InTAct guarantee, determinism, resume."""

from pathlib import Path

import torch

from intact.config import resolve_run
from intact.evaluate import evaluate_task
from intact.io import load_tensors, read_json
from intact.naming import format_value
from intact.regularizers.hypercube import load_hypercubes
from intact.results import collect_run, read_accuracy_matrix
from intact.train import train_task


def _train_run(bench, method, out, tasks, **train_kwargs):
    run = resolve_run(bench["config"], "digits", method, 0)
    for t in range(tasks):
        train_task(run, t, manifest=bench["manifest"], backbone_weights=bench["weights"], out_dir=out / f"task{t}",
                   prev_dir=out / f"task{t - 1}" if t else None, threads=1, progress=False, **train_kwargs)
    return run


def _head_logits(state_path, z):
    s = load_tensors(state_path)
    return z @ s["head.fc0.weight"].T + s["head.fc0.bias"]


def test_huge_intdrift_keeps_predictions_inside_the_hypercube(tiny_bench, tmp_path):
    """With a very large lambda_IntDrift, the head's predictions anywhere in the hypercube survive a new task.

    The guarantee is exact where it is a theorem: a point whose old logit margin exceeds twice the
    certificate cannot change class. With Adam the residual drift is set by the learning rate, not by
    lambda (Adam normalises the gradient scale), so points right at a decision boundary may still flip.
    """
    import json

    overrides = "lambda_feat=0,lambda_var=0,lambda_align=0,optim.epochs=5"
    _train_run(tiny_bench, f"coda_p+intact@lambda_intdrift=1e4,{overrides}", tmp_path, 2)
    cube = load_hypercubes(tmp_path / "task0/hypercube.safetensors")["fc0"]
    z = cube.sample(5000, torch.Generator().manual_seed(0))
    before = _head_logits(tmp_path / "task0/state.safetensors", z)
    after = _head_logits(tmp_path / "task1/state.safetensors", z)
    cert = json.loads((tmp_path / "task1/train.json").read_text())["certificate"]
    assert (after - before).abs().max() <= cert + 1e-5          # the certificate bounds every sampled drift
    top2 = before.topk(2, dim=1).values
    safe = (top2[:, 0] - top2[:, 1]) > 2 * cert
    assert safe.float().mean() > 0.5
    assert torch.equal(before[safe].argmax(1), after[safe].argmax(1))   # no safe point changes class
    assert (before.argmax(1) == after.argmax(1)).float().mean() > 0.95

    # the same training without the term: a far larger drift bound, and many more changed predictions
    _train_run(tiny_bench, f"coda_p+intact@lambda_intdrift=0,{overrides}", tmp_path / "plain", 2)
    plain_cert = json.loads((tmp_path / "plain/task1/train.json").read_text())["certificate"]
    plain_after = _head_logits(tmp_path / "plain/task1/state.safetensors", z)
    assert plain_cert > 10 * cert
    assert (before.argmax(1) != plain_after.argmax(1)).float().mean() > 0.2


def test_same_config_and_seed_give_identical_R(tiny_bench, tmp_path):
    Rs = []
    for rep in ("a", "b"):
        out = tmp_path / rep
        run = _train_run(tiny_bench, "coda_p+intact", out, 3)
        for t in range(3):
            evaluate_task(run, t, manifest=tiny_bench["manifest"], backbone_weights=tiny_bench["weights"],
                          state=out / f"task{t}/state.safetensors", out_path=out / f"task{t}/eval.json", threads=1)
        collect_run([out / f"task{t}/eval.json" for t in range(3)], [out / f"task{t}/train.json" for t in range(3)],
                    out / "R.csv", out / "metrics.json", 10)
        Rs.append(read_accuracy_matrix(out / "R.csv"))
        assert (out / "R.csv").read_bytes() == (tmp_path / "a/R.csv").read_bytes()
    assert Rs[0].equals(Rs[1])
    for t in range(3):
        a = load_tensors(tmp_path / f"a/task{t}/state.safetensors")
        b = load_tensors(tmp_path / f"b/task{t}/state.safetensors")
        assert all(torch.equal(a[k], b[k]) for k in a)
        # the same tensors, the same bytes (the metadata in a stable order), so the digests the records keep agree
        for name in ("state", "hypercube"):
            assert (tmp_path / f"a/task{t}/{name}.safetensors").read_bytes() == \
                (tmp_path / f"b/task{t}/{name}.safetensors").read_bytes()
        ta, tb = (read_json(tmp_path / f"{r}/task{t}/train.json") for r in "ab")
        assert (ta["state_sha256"], ta["hypercube_sha256"]) == (tb["state_sha256"], tb["hypercube_sha256"])


def _data_offset(path) -> int:
    """Where a safetensors file's tensor bytes start: after its 8-byte length and its header, whose length follows
    the metadata (the run's name)."""
    with open(path, "rb") as f:
        return 8 + int.from_bytes(f.read(8), "little")


def test_a_runs_name_does_not_change_its_numbers(tiny_bench, tmp_path):
    """Two names for the same settings train the same tensors. A loaded tensor was a view into the file, starting
    where the header ends; a name of another length moved the hypercube to another alignment, and the CPU's kernels
    rounded the next task's L_IntDrift differently (on the digits study, coda_p+intact@lambda_intdrift=0.01 and
    coda_p+intact, the same settings, differed by 0.07-0.39 AA points)."""
    default = format_value(resolve_run(tiny_bench["config"], "digits", "coda_p+intact", 0).intact.lambda_feat)
    _train_run(tiny_bench, "coda_p+intact", tmp_path / "a", 2)
    aligned = _data_offset(tmp_path / "a/task0/hypercube.safetensors") % 16
    for zeros in range(1, 17):   # the same value, written one character longer each time, until the alignment differs
        name, out = f"coda_p+intact@lambda_feat={default}.{'0' * zeros}", tmp_path / f"b{zeros}"
        _train_run(tiny_bench, name, out, 2)
        if _data_offset(out / "task0/hypercube.safetensors") % 16 != aligned:
            break
    else:
        raise AssertionError("no name of another alignment")
    a, b = (load_tensors(d / "task1/state.safetensors") for d in (tmp_path / "a", out))
    assert all(torch.equal(a[k], b[k]) for k in a), name


def test_resume_mid_task_is_bit_identical(tiny_bench, tmp_path):
    import pytest
    from intact.train import Preempted

    method = "coda_p+intact"
    _train_run(tiny_bench, method, tmp_path / "full", 2)
    run = resolve_run(tiny_bench["config"], "digits", method, 0)
    out = tmp_path / "cut"
    train_task(run, 0, manifest=tiny_bench["manifest"], backbone_weights=tiny_bench["weights"], out_dir=out / "task0",
               threads=1, progress=False)
    with pytest.raises(Preempted):
        train_task(run, 1, manifest=tiny_bench["manifest"], backbone_weights=tiny_bench["weights"],
                   out_dir=out / "task1",
                   prev_dir=out / "task0", threads=1, progress=False, max_steps=3)
    assert (out / "task1/checkpoint.pt").exists() and not (out / "task1/state.safetensors").exists()
    record = train_task(run, 1, manifest=tiny_bench["manifest"], backbone_weights=tiny_bench["weights"],
                        out_dir=out / "task1",
                        prev_dir=out / "task0", threads=1, progress=False)
    assert record["resumed_from"] == {"epoch": 0, "step": 3}
    assert not (out / "task1/checkpoint.pt").exists()
    a, b = load_tensors(tmp_path / "full/task1/state.safetensors"), load_tensors(out / "task1/state.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_job_stopped_on_an_epochs_last_step_resumes_at_the_next_epoch(tiny_bench, tmp_path):
    """Stopped on the last step of an epoch, the job records the epoch before it checkpoints: it resumed into an
    empty epoch (digits' loader gave one batch of no image, and every retry failed). Bit-identical to a whole run;
    a job stopped mid-epoch records the epoch's seconds so far, which its resumed epoch adds to."""
    import pytest

    from intact.data.loader import steps_per_epoch
    from intact.io import load_checkpoint
    from intact.restore import build_method
    from intact.train import Preempted

    method = "coda_p@optim.epochs=2"
    _train_run(tiny_bench, method, tmp_path / "full", 1)
    run = resolve_run(tiny_bench["config"], "digits", method, 0)
    bench = build_method(run, tiny_bench["manifest"], tiny_bench["weights"], torch.device("cpu"))[0]
    steps = steps_per_epoch(len(bench.train_set(0)), run.optim.batch_size, run.optim.drop_last)
    kw = dict(manifest=tiny_bench["manifest"], backbone_weights=tiny_bench["weights"], threads=1, progress=False)
    out = tmp_path / "cut/task0"
    with pytest.raises(Preempted, match=f"stopped at epoch 0 step {steps}"):
        train_task(run, 0, out_dir=out, max_steps=steps, **kw)
    ck = load_checkpoint(out / "checkpoint.pt")
    assert (ck["epoch"], ck["step"], len(ck["history"]), ck["epoch_seconds"]) == (1, 0, 1, 0.0)
    with pytest.raises(Preempted, match=f"stopped at epoch 1 step {steps // 2}"):
        train_task(run, 0, out_dir=out, max_steps=steps // 2, **kw)
    before = load_checkpoint(out / "checkpoint.pt")["epoch_seconds"]
    record = train_task(run, 0, out_dir=out, **kw)
    assert record["resumed_from"] == {"epoch": 1, "step": steps // 2} and before > 0
    assert record["epochs"][1]["seconds"] > before
    a, b = load_tensors(tmp_path / "full/task0/state.safetensors"), load_tensors(out / "state.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_checkpoint_written_from_other_inputs_is_not_resumed(tiny_bench, tmp_path, capsys):
    """Its run's hash covers the settings, not the files: before 2026-12-01 a task resumed a checkpoint written
    before the previous task was redone (or the backbone's weights replaced at the same path, or the data prepared
    again), and its state mixed the two. The checkpoint now records the sha256 of what the task started from."""
    import pytest
    from safetensors import safe_open

    from intact.io import save_tensors
    from intact.train import Preempted

    run = resolve_run(tiny_bench["config"], "digits", "coda_p+intact", 0)
    kw = dict(manifest=tiny_bench["manifest"], backbone_weights=tiny_bench["weights"], threads=1, progress=False)
    out = tmp_path / "cut"
    train_task(run, 0, out_dir=out / "task0", **kw)
    with pytest.raises(Preempted):
        train_task(run, 1, out_dir=out / "task1", prev_dir=out / "task0", max_steps=3, **kw)
    state = load_tensors(out / "task0/state.safetensors")
    key = sorted(state)[0]
    with safe_open(str(out / "task0/state.safetensors"), framework="pt") as f:
        meta = f.metadata()
    save_tensors(out / "task0/state.safetensors", {**state, key: state[key] + 1e-3}, meta)   # task 0, redone
    capsys.readouterr()
    record = train_task(run, 1, out_dir=out / "task1", prev_dir=out / "task0", **kw)
    assert record["resumed_from"] is None
    assert ("it was written from other inputs: the previous task's state or hypercubes changed since; the task "
            "starts from its first epoch") in capsys.readouterr().err
    fresh = train_task(run, 1, out_dir=tmp_path / "fresh", prev_dir=out / "task0", **kw)
    assert fresh["state_sha256"] == record["state_sha256"]


def test_a_checkpoint_of_other_code_is_not_resumed(tiny_bench, tmp_path, capsys, monkeypatch):
    """A task killed, the code edited, the job run again: it does not continue the epochs the code before trained
    (the code: every Python file of the package)."""
    import pytest

    import intact.restore
    from intact.train import Preempted

    package = Path(intact.restore.__file__).parent
    assert intact.restore.job_code().startswith(f"{len(list(package.rglob('*.py')))}:")
    run = resolve_run(tiny_bench["config"], "digits", "coda_p", 0)
    kw = dict(manifest=tiny_bench["manifest"], backbone_weights=tiny_bench["weights"], threads=1, progress=False)
    with pytest.raises(Preempted):
        train_task(run, 0, out_dir=tmp_path / "task0", max_steps=3, **kw)
    monkeypatch.setattr(intact.restore, "job_code", lambda: "1:edited")
    capsys.readouterr()
    assert train_task(run, 0, out_dir=tmp_path / "task0", **kw)["resumed_from"] is None
    assert "written from other inputs: the training job's code changed since" in capsys.readouterr().err


def test_multilayer_head_protects_every_linear_against_its_own_input_box(tiny_bench, tmp_path):
    import json

    import itertools

    from intact.settings import HeadConfig
    from intact.models.heads import Head
    from intact.regularizers.interval import affine_drift_bounds

    cfg = dict(tiny_bench["config"], head={"hidden": [16], "negative_slope": 0.1})
    run = resolve_run(cfg, "digits", "coda_p+intact", 0)
    for t in range(2):
        train_task(run, t, manifest=tiny_bench["manifest"], backbone_weights=tiny_bench["weights"],
                   out_dir=tmp_path / f"task{t}",
                   prev_dir=tmp_path / f"task{t - 1}" if t else None, threads=1, progress=False)
    cubes = load_hypercubes(tmp_path / "task1/hypercube.safetensors")
    assert set(cubes) == {"fc0", "fc1"} and cubes["fc0"].dim == 64 and cubes["fc1"].dim == 16
    record = json.loads((tmp_path / "task1/train.json").read_text())
    assert record["epochs"][-1]["intdrift"] > 0 and record["certificate"] is not None
    assert set(record["hypercube"]) == {"fc0", "fc1"}

    # each layer's bound is exact over the corners of its own input box (a small slice of it)
    head = Head(4, 3, HeadConfig(hidden=(5,), negative_slope=0.1))
    old = {n: (m.weight.detach().clone(), m.bias.detach().clone()) for n, m in head.linears()}
    with torch.no_grad():
        for _, m in head.linears():
            m.weight.add_(0.2 * torch.randn(m.weight.shape))
    for name, layer in head.linears():
        d = layer.in_features
        lo, hi = -torch.rand(d), torch.rand(d)
        dW, db = layer.weight.detach() - old[name][0], layer.bias.detach() - old[name][1]
        blo, bhi = affine_drift_bounds(dW, db, lo, hi)
        pts = lo + torch.tensor(list(itertools.product([0.0, 1.0], repeat=d))) * (hi - lo)
        vals = pts @ dW.T + db
        torch.testing.assert_close(blo, vals.min(0).values)
        torch.testing.assert_close(bhi, vals.max(0).values)


#: a test-only method plugin: net_finetune whose every step draws from the global RNGs (torch's noise on the
#: inputs, Python's and NumPy's a scale), as a plugin may; its declaration torch-free, its class in its own module
NOISY_DECL = '''
from intact.methods.declare import Method
from intact.methods.net_finetune import NetworkSettings

METHOD = Method("noisy", NetworkSettings, "noisy_impl:Noisy", "net_finetune with noise", uses_backbone=False)
'''
NOISY_IMPL = '''
import random

import numpy as np
import torch

from intact.methods.shared.network import NetworkMethod


class Noisy(NetworkMethod):
    def forward_train(self, x):
        scale = 0.2 + 0.1 * random.random() + 0.1 * float(np.random.rand())
        return super().forward_train(x + scale * torch.randn_like(x))
'''

#: in the plugin's process: two tasks straight through, and the same cut after 3 steps of task 1 and resumed, with
#: the training data read as a dataset that is not a TensorDataset (through DataLoader, as a plugin benchmark's)
#: and as the digits' own; prints whether the final states are equal, bit for bit
RESUME = '''
import json, sys
from pathlib import Path
import torch
from torch.utils.data import Dataset
from intact.config import resolve_run
from intact.data import benchmark_class
from intact.io import load_tensors, read_json
from intact.testing import train_one
from intact.train import Preempted


class Items(Dataset):
    def __init__(self, data):
        self.data = data
    def __len__(self):
        return len(self.data)
    def __getitem__(self, i):
        return self.data[i]


bench, out = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])
run = resolve_run(bench["config"], "digits", "noisy", 0)
cls = benchmark_class("digits")
plain = cls.train_set
for way in ("dataloader", "tensors"):
    if way == "dataloader":
        cls.train_set = lambda self, task, eval_split="test": Items(plain(self, task, eval_split))
    else:
        cls.train_set = plain
    full, cut = out / way / "full", out / way / "cut"
    for t in (0, 1):
        train_one(bench, run, full / f"task{t}", t, full / "task0" if t else None)
    train_one(bench, run, cut / "task0", 0)
    try:
        train_one(bench, run, cut / "task1", 1, cut / "task0", max_steps=3)
    except Preempted:
        pass
    assert train_one(bench, run, cut / "task1", 1, cut / "task0")["resumed_from"] == {"epoch": 0, "step": 3}
    a, b = load_tensors(full / "task1/state.safetensors"), load_tensors(cut / "task1/state.safetensors")
    print(way, all(torch.equal(a[k], b[k]) for k in a))
'''


def test_a_method_drawing_from_the_global_rngs_resumes_bit_for_bit(tiny_bench, tmp_path):
    """A checkpoint restores torch's (and CUDA's), Python's and NumPy's global generators, and nothing draws from
    them between the restore and the next step (a DataLoader iterator takes its seed from a generator of its own)."""
    import json
    import os
    import subprocess
    import sys

    from conftest import pythonpath
    from test_plugins import add_plugin

    add_plugin(tmp_path / "site", "noisy_dist", {"noisy": "noisy_decl:METHOD"},
               {"noisy_decl": NOISY_DECL, "noisy_impl": NOISY_IMPL})
    (tmp_path / "bench.json").write_text(json.dumps({k: str(v) if k != "config" else v for k, v in tiny_bench.items()}))
    env = {**os.environ, "PYTHONPATH": pythonpath(tmp_path / "site")}
    proc = subprocess.run([sys.executable, "-c", RESUME, str(tmp_path / "bench.json"), str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["dataloader", "True", "tensors", "True"], proc.stdout + proc.stderr[-2000:]


def test_train_json_records_the_optimizer_as_built(tiny_bench, tmp_path):
    """The optimizer a method builds for itself (C-Prompt: AdamW at its own weight decay on every group) is what
    train.json says, not only the run's optim section (which leaves the method's own settings out)."""
    for name, cls, decay in (("coda_p", "Adam", 0.0), ("compositional_prompt", "AdamW", 0.01)):
        run = resolve_run(tiny_bench["config"], "digits", name, 0)
        rec = train_task(run, 0, manifest=tiny_bench["manifest"], backbone_weights=tiny_bench["weights"],
                         out_dir=tmp_path / name, threads=1, progress=False)
        opt = rec["optimizer"]
        assert (opt["class"], opt["schedule"], [g["name"] for g in opt["groups"]]) == \
            (cls, run.optim.schedule, ["head", "prompts"])
        assert {g["weight_decay"] for g in opt["groups"]} == {decay} and all(g["parameters"] > 0 for g in opt["groups"])
        assert opt["groups"][0]["lr"] == run.optim.lr_head
