"""The ViT-B/16 checkpoints the paper's numbers depend on, declared once (no torch here).

The paper's configs (``configs/paper/base.yaml``) declare these under ``backbones:`` with the same names,
``tools/export_timm_weights.py --named`` writes each of them, and the paper tables name the backbone of every
"here" column through :func:`describe`. Provenance of the choice: ``docs/protocols.md``, "Backbone weights".
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence


@dataclass(frozen=True)
class NamedBackbone:
    """One pretrained checkpoint: its timm name (with tag), the variable naming its local file, whose it is."""

    name: str
    model: str
    env: str
    source: str


#: the authors' code builds timm's *untagged* ``vit_base_patch16_224(pretrained=True)``: what that name means
#: depends on the timm version installed (docs/protocols.md, "Backbone weights")
NAMED_BACKBONES: dict[str, NamedBackbone] = {b.name: b for b in (
    NamedBackbone("vit_b16_augreg2_in1k", "vit_base_patch16_224.augreg2_in21k_ft_in1k", "INTACT_VIT_B16_AUGREG2",
                  "the authors' code under timm >= 0.9 (the paper's stated 0.9.7; install-requirements.sh upgrades "
                  "timm)"),
    NamedBackbone("vit_b16_augreg_in1k", "vit_base_patch16_224.augreg_in21k_ft_in1k", "INTACT_VIT_B16_AUGREG_IN1K",
                  "the authors' code under its pinned timm==0.4.12 (requirements.txt)"),
    NamedBackbone("vit_b16_in21k", "vit_base_patch16_224.augreg_in21k", "INTACT_VIT_B16",
                  "InfLoRA's ImageNet-21k checkpoint; C-Prompt's and KA-Prompt's local file as read here"),
)}
#: the one the paper configs' benchmarks use (the InTAct, CODA-P, L2P and DualPrompt rows: the authors' weights)
AUTHORS = "vit_b16_augreg2_in1k"
#: input normalisations: the authors' code feeds [0, 1] pixels ("raw", the default), as KA-Prompt's does (the paper
#: says "normalized following KA-Prompt"); "timm": timm's pretrained config of these weights (mean = std = 0.5)
INPUT_NORMS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "raw": ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),
    "timm": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
}


def input_norm_name(mean: Sequence[float], std: Sequence[float]) -> str | None:
    """``raw`` / ``timm`` when (mean, std) is one of :data:`INPUT_NORMS`, else None."""
    for name, (m, s) in INPUT_NORMS.items():
        if tuple(map(float, mean)) == m and tuple(map(float, std)) == s:
            return name
    return None


def describe(name: str, model: str, mean: Sequence[float] = (), std: Sequence[float] = ()) -> str:
    """``name = timm <model> (<whose>), input <norm>``: the table notes' description of one backbone."""
    known = next((b for b in NAMED_BACKBONES.values() if b.model == model), None)
    text = f"{name} = timm {model}" + (f" ({known.source})" if known else "")
    norm = input_norm_name(mean, std) if mean else None
    if norm == "raw":
        text += ", input [0, 1] pixels (no normalisation, as the authors' code)"
    elif norm == "timm":
        text += ", input normalised with mean = std = 0.5 (timm's config of these weights)"
    elif mean:
        text += f", input mean {list(mean)} std {list(std)}"
    return text
