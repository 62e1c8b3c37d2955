"""The method registry: name -> implementation, resolved lazily.

The table is plain strings so that validating a config (at Snakefile start-up, on every cluster job)
does not import torch; :func:`method_class` imports the implementation when a job needs it. Adding a
method = one file in this package + one line here.
"""

from __future__ import annotations

from dataclasses import dataclass

from intact.registry import load_target, resolve


@dataclass(frozen=True)
class MethodEntry:
    target: str            #: "module:Class"
    accepts_intact: bool   #: "<name>+intact" is a valid run (the method adds the regularizer's terms)
    description: str
    #: False: every task starts from a fresh model (joint); the workflow then schedules its tasks
    #: independently and the job loads neither the previous state nor its hypercubes
    loads_previous_state: bool = True
    #: False: the method trains a whole network of its own; the job builds no frozen backbone
    uses_backbone: bool = True
    #: why "<name>+intact" is refused, where it is (said by the config checks)
    intact_refusal: str = ""


METHODS: dict[str, MethodEntry] = {
    "coda_p": MethodEntry("intact.methods.coda_p:CodaPrompt", True, "CODA-Prompt (Smith et al., CVPR 2023)"),
    "l2p": MethodEntry("intact.methods.l2p:L2P", True, "L2P++ (Wang et al., CVPR 2022), prefix tuning"),
    "dualprompt": MethodEntry("intact.methods.dualprompt:DualPrompt", True, "DualPrompt (Wang et al., ECCV 2022)"),
    "inflora": MethodEntry("intact.methods.inflora:InfLoRA", True, "InfLoRA (Liang & Li, CVPR 2024), one shared head"),
    "s_prompts": MethodEntry("intact.methods.s_prompts:SPrompts", False, "S-Prompts (Wang et al., NeurIPS 2022)",
                             intact_refusal="it shares no component between domains (one prompt and one head per domain, "
                                            "the domain picked by k-means), so InTAct has nothing to protect"),
    "c_prompt": MethodEntry("intact.methods.c_prompt:CPrompt", True, "C-Prompt (Liu et al., IJCV 2024), as its code runs it"),
    "ka_prompt": MethodEntry("intact.methods.ka_prompt:KAPrompt", True, "KA-Prompt (ICML 2025) on C-Prompt, as its code runs it"),
    "finetune": MethodEntry("intact.methods.finetune:Finetune", True, "sequential fine-tuning of one shared prompt + head"),
    "ewc": MethodEntry("intact.methods.ewc:EWC", False, "EWC (Kirkpatrick et al., 2017) on one shared prompt + head"),
    "lwf": MethodEntry("intact.methods.lwf:LwF", False, "LwF (Li & Hoiem, 2017) on one shared prompt + head"),
    "joint": MethodEntry("intact.methods.joint:Joint", False, "upper bound: fresh training on the union of tasks 0..t", loads_previous_state=False),
    # the network family: a whole MLP / CNN (methods.<name>.model) trained end to end, no frozen backbone
    "net_finetune": MethodEntry("intact.methods.network:NetworkFinetune", True, "sequential fine-tuning of a whole network", uses_backbone=False),
    "net_ewc": MethodEntry("intact.methods.network:NetworkEWC", False, "EWC on a whole network", uses_backbone=False),
    "net_lwf": MethodEntry("intact.methods.network:NetworkLwF", False, "LwF on a whole network", uses_backbone=False),
}


def method_class(base: str) -> type:
    """Import and return the class registered as ``base``."""
    return load_target(resolve(METHODS, base, "method").target)


def create_method(run, backbone, num_classes: int, num_tasks: int):
    """Instantiate the method of ``run`` (a :class:`~intact.config.RunConfig`) on ``backbone``."""
    return method_class(run.base)(run, backbone, num_classes, num_tasks)
