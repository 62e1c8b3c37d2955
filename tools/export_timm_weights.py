"""Write a timm model's pretrained weights to one .safetensors file and print its sha256.

Run on a machine WITH internet (timm downloads from the Hugging Face hub), then copy the file to the
cluster and point `backbones.<name>.weights` (or the variable it names) at it; paste the printed sha256
into `backbones.<name>.sha256` to have every job check it:

    python tools/export_timm_weights.py --named weights/          # every named backbone of the paper configs
    python tools/export_timm_weights.py vit_base_patch16_224.augreg_in21k vit_b16_in21k.safetensors

`--named DIR` writes `DIR/<name>.safetensors` for each backbone declared in
src/intact/models/named_backbones.py (the authors' weights under timm >= 0.9 and under timm 0.4.12,
and timm's augreg ImageNet-21k weights: InfLoRA's, and C-/KA-Prompt's as read here) and prints the
`export VAR=...` line each paper config reads. The file's metadata records the timm model name; the
pipeline refuses a file written for another model. Needs only timm, torch and safetensors (pip install
timm safetensors). The pipeline never downloads.

Already have the C-Prompt / KA-Prompt authors' `vit_base_p16_224_in22k.pth`? It needs no export: point
`backbones.vit_b16_in21k.weights` (`export INTACT_VIT_B16=/path/to/vit_base_p16_224_in22k.pth`) at it and
paste `sha256sum`'s value into `backbones.vit_b16_in21k.sha256`. A .pth in timm's keys loads as is (its
classifier head is dropped); one in other keys is refused by name, where the authors' `strict=False` would
have left the ViT random. Which checkpoint that file is: docs/protocols.md section 7, "Backbone weights".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # intact.models.named_backbones (no torch)


def export(model_name: str, out: Path) -> dict:
    """Write ``model_name``'s pretrained weights to ``out``; return what was written (with the sha256)."""
    import timm
    import torch
    from safetensors.torch import save_file

    model = timm.create_model(model_name, pretrained=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    meta = {"timm_model": model_name, "timm_version": timm.__version__, "torch_version": torch.__version__}
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out), metadata=meta)
    return {"file": str(out), "sha256": hashlib.sha256(out.read_bytes()).hexdigest(), **meta}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?",
                    help="timm name with its pretrained tag, e.g. vit_base_patch16_224.augreg_in21k")
    ap.add_argument("out", nargs="?", type=Path, help="the .safetensors file to write")
    ap.add_argument("--named", type=Path, metavar="DIR",
                    help="write every named backbone of the paper configs into DIR")
    args = ap.parse_args()
    if args.named is None and (args.model is None or args.out is None):
        ap.error("give MODEL OUT, or --named DIR")
    if args.named is None:
        print(json.dumps(export(args.model, args.out), indent=2))
        return
    from intact.models.named_backbones import NAMED_BACKBONES

    for b in NAMED_BACKBONES.values():
        rec = export(b.model, args.named / f"{b.name}.safetensors")
        print(json.dumps({"backbone": b.name, "source": b.source, **rec}, indent=2))
        print(f"export {b.env}={Path(rec['file']).resolve()}   # backbones.{b.name}.sha256: {rec['sha256']}")


if __name__ == "__main__":
    main()
