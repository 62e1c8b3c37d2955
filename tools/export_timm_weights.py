"""Write a timm model's pretrained weights to one .safetensors file and print its sha256.

Run on a machine WITH internet (timm downloads from the Hugging Face hub), then copy the file to the
cluster and point `backbones.<name>.weights` (or $INTACT_VIT_B16) at it; paste the printed sha256
into `backbones.<name>.sha256` to have every job check it:

    python tools/export_timm_weights.py vit_base_patch16_224.augreg_in21k vit_base_patch16_224.augreg_in21k.safetensors

Needs only timm, torch and safetensors (pip install timm safetensors). The pipeline never downloads.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="timm name with its pretrained tag, e.g. vit_base_patch16_224.augreg_in21k")
    ap.add_argument("out", type=Path, help="the .safetensors file to write")
    args = ap.parse_args()

    import timm
    import torch
    from safetensors.torch import save_file

    model = timm.create_model(args.model, pretrained=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    meta = {"timm_model": args.model, "timm_version": timm.__version__, "torch_version": torch.__version__}
    save_file(state, str(args.out), metadata=meta)
    digest = hashlib.sha256(args.out.read_bytes()).hexdigest()
    print(json.dumps({"file": str(args.out), "sha256": digest, **meta}, indent=2))


if __name__ == "__main__":
    main()
