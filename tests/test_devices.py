"""A run starts from the same numbers on every device: every method draws its random values from CPU task generators
(``intact.seeding.task_generator``) into new CPU tensors, never in place into a tensor it holds. In place, a CPU
generator cannot draw into a CUDA tensor (torch refuses it), so such a method fails on a GPU: ESN and CPrompt did, at
their first task (CHANGELOG.md). Checked on the CPU by recording every in-place draw while each method begins a task,
takes a training step and ends the task, twice; and where CUDA is visible (``bash tools/gpu_check.sh``), by taking
every method through the same two tasks there."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from intact.config import resolve_run
from intact.methods import METHODS
from intact.methods.shared.base import batch_loss, batches, enter_task, leave_task, trainable_state
from intact.restore import build_method
from intact.seeding import derive_seed, init_on_cpu_, seed_everything, task_generator

#: every built-in method, and with InTAct where it takes it (its penalty draws too: the hypercube's samples)
RUNS = sorted(METHODS) + [f"{m}+intact" for m in sorted(METHODS) if METHODS[m].accepts_intact]


class InPlaceDraws(TorchDispatchMode):
    """The storages that random ops draw into in place from an explicit generator (``uniform_``, ``normal_``, ...,
    as ``nn.init`` calls them)."""

    def __init__(self) -> None:
        super().__init__()
        self.storages: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if kwargs.get("generator") is not None and func.overloadpacket.__name__.endswith("_"):
            self.storages.append(args[0].untyped_storage().data_ptr())
        return func(*args, **kwargs)


def test_the_recorder_sees_an_in_place_draw_and_init_on_cpu_draws_into_a_new_tensor():
    weight = torch.nn.Linear(4, 3).weight
    with InPlaceDraws() as draws:
        with torch.no_grad():
            torch.nn.init.uniform_(weight, generator=torch.Generator().manual_seed(0))
    assert draws.storages == [weight.untyped_storage().data_ptr()]
    before = weight.detach().clone()
    with InPlaceDraws() as draws:
        init_on_cpu_(weight, torch.nn.init.uniform_, torch.Generator().manual_seed(0))
    assert len(draws.storages) == 1 and draws.storages[0] != weight.untyped_storage().data_ptr()
    assert torch.equal(weight, before)                      # the same values as the draw in place


def _built(run, bench: dict, device: str):
    """The benchmark and ``run``'s method on ``device``, seeded as a task-0 job seeds (``intact.train.set_up``)."""
    seed_everything(derive_seed(run.seed, 0, "init"))
    data, model, _ = build_method(run, bench["manifest"], bench["weights"], torch.device(device))
    return data, model


def _two_tasks(data, model) -> None:
    """Two tasks as a job takes them, in short: begin the task, one training step, end the task (hypercubes,
    statistics)."""
    for task in (0, 1):
        train_set = model.training_data(data, task)
        enter_task(model, task, train_set)
        x, y = next(batches(model, train_set))
        model.train()
        batch_loss(model, x, y)[0].backward()
        model.eval()
        leave_task(model, task, train_set)


@pytest.mark.parametrize("method", RUNS)
def test_a_method_draws_its_random_values_into_new_tensors_not_its_own(tiny_bench, method):
    data, model = _built(resolve_run(tiny_bench["config"], "digits", method, 0), tiny_bench, "cpu")
    own = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}   # alive throughout
    with InPlaceDraws() as draws:
        _two_tasks(data, model)
    assert not own & set(draws.storages), f"{method} draws in place into its own tensors: use init_on_cpu_"


def test_init_on_cpu_gives_the_values_of_the_draw_in_place():
    for init, args, kwargs in ((torch.nn.init.trunc_normal_, (), {"std": 0.02}),
                               (torch.nn.init.kaiming_uniform_, (), {"nonlinearity": "linear"}),
                               (torch.nn.init.orthogonal_, (), {}), (torch.nn.init.uniform_, (-0.5, 0.5), {})):
        a, b = torch.empty(6, 5), torch.empty(6, 5)
        init(a, *args, generator=task_generator(0, 1, "x"), **kwargs)
        init_on_cpu_(b, init, task_generator(0, 1, "x"), *args, **kwargs)
        assert torch.equal(a, b), init.__name__


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_every_method_takes_two_tasks_on_cuda(tiny_bench):
    """Where the CPU test above cannot see: any op of a task's hooks or step that mixes devices. (Not the values:
    a start computed from data, InfLoRA's, differs between the devices by their rounding.)"""
    failures = []   # every method's, in one run of the GPU check
    for method in RUNS:
        try:
            data, model = _built(resolve_run(tiny_bench["config"], "digits", method, 0), tiny_bench, "cuda")
            _two_tasks(data, model)
            assert all(t.device.type == "cuda" for t in trainable_state(model).values())
        except Exception as err:  # noqa: BLE001 - a method that fails on CUDA is reported with the others
            failures.append(f"{method}: {type(err).__name__}: {err}")
    assert not failures, "\n".join(failures)
