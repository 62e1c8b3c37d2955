"""CUDA-only checks (skipped without a GPU; `bash tools/gpu_check.sh` runs them with the whole suite).

Random initialisation draws on the CPU, so a run starts from the same prompts and samples the same
points on every device; these tests pin that down where CPU and CUDA tensors meet.
"""

import pytest
import torch

from intact.methods.impl.coda_p import CodaPromptPool
from intact.regularizers.hypercube import Hypercube

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
def test_coda_pool_initialises_identically_on_cpu_and_cuda():
    pools = {d: CodaPromptPool(16, pool_size=6, length=4, layers=(0, 1), num_tasks=3).to(d) for d in ("cpu", "cuda")}
    for task in range(3):  # from task 1 on, new components are orthogonalised against the old ones
        for pool in pools.values():
            pool.begin_task(task, torch.Generator().manual_seed(task))
        for (name, p_cpu), (_, p_gpu) in zip(pools["cpu"].named_parameters(), pools["cuda"].named_parameters()):
            assert p_gpu.device.type == "cuda"
            torch.testing.assert_close(p_gpu.cpu(), p_cpu, msg=f"task {task}: {name}")


@cuda
def test_hypercube_samples_on_its_device_and_agree_with_cpu():
    lower, upper = torch.zeros(5), torch.arange(1.0, 6.0)
    cpu = Hypercube(lower, upper).sample(100, torch.Generator().manual_seed(0))
    gpu = Hypercube(lower, upper).to("cuda").sample(100, torch.Generator().manual_seed(0))
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu)
