"""The current task of a pool or adapter: a buffer saved with the state, and a host copy for the forward."""

from __future__ import annotations

import torch
from torch import nn


class TaskIndexed(nn.Module):
    """A module whose forward depends on the current task (which prompts / LoRA factors are live).

    ``task`` is a buffer, so it travels with ``state_dict``; ``task_index`` reads the buffer on the CPU (free)
    and a host copy on a device, because reading a device buffer in every forward would wait for the device.
    """

    def register_task(self) -> None:
        """Create the ``task`` buffer (call it in ``__init__`` where the buffer belongs in the state's order)."""
        self.register_buffer("task", torch.tensor(0, dtype=torch.long))
        self._task_host = 0
        self.register_load_state_dict_post_hook(lambda module, keys: setattr(module, "_task_host", int(module.task)))

    @property
    def task_index(self) -> int:
        """The current task."""
        return int(self.task) if self.task.device.type == "cpu" else self._task_host

    def set_task(self, task: int) -> None:
        """Make ``task`` current (buffer and host copy)."""
        self.task.fill_(task)
        self._task_host = task
