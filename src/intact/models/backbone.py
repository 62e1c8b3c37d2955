"""The frozen ViT: creation by timm name, weights from a local file, prompted [CLS] features."""

from __future__ import annotations

import pickle
import re
import zipfile
from pathlib import Path

import timm
import torch
from safetensors import SafetensorError
from torch import nn

import intact.models.vit_digits  # noqa: F401  (registers vit_digits_* in timm)
from intact.settings import BackboneConfig
from intact.paths import file_problem
from intact.guard import nonfinite
from intact.hashing import sha256_file
from intact.models.prefix import Prefix, block_with_prefix, check_prefixable

WEIGHT_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin", ".npz")


class WeightsError(ValueError):
    """A weights file that is missing, has the wrong checksum, or does not fit the model."""


def read_state_dict(path: str | Path, mmap: bool = False) -> dict[str, torch.Tensor]:
    """Load a state dict from .safetensors, or .pth/.pt/.bin with ``weights_only=True`` (no pickle code);
    ``mmap``: a .pth/.pt/.bin file's tensors mapped, not read, where its format allows (their shapes cost nothing)."""
    path = Path(path)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except RuntimeError:
        if not mmap:
            raise
        state = torch.load(path, map_location="cpu", weights_only=True)  # torch's legacy format cannot be mapped
    for key in ("state_dict", "model", "module"):
        if isinstance(state, dict) and key in state and isinstance(state[key], dict):
            state = state[key]
    return state


def _weight_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Each tensor's name and shape in a .safetensors/.pth/.pt/.bin file, without reading the tensors."""
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    return {k: tuple(v.shape) for k, v in read_state_dict(path, mmap=True).items() if isinstance(v, torch.Tensor)}


def written_for(path: Path) -> str | None:
    """The timm model name ``tools/export_timm_weights.py`` recorded in a .safetensors file, if any."""
    if path.suffix != ".safetensors":
        return None
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return (f.metadata() or {}).get("timm_model")


def _other_model(path: Path, model: str) -> str | None:
    """The rest of a sentence about a weights file that records another timm model than ``model``, else None:
    e.g. ImageNet-21k weights for the authors' fine-tuned backbone load without error and give wrong numbers."""
    recorded = written_for(path)
    if recorded is None or recorded == model:
        return None
    return (f"was written for timm model {recorded!r}, not {model!r} (tools/export_timm_weights.py --named writes "
            "each named backbone)")


def _state_problem(vit: nn.Module, shapes: dict[str, tuple[int, ...]]) -> str | None:
    """Why a state dict of these tensor shapes does not fit ``vit`` (a classifier head the model lacks is
    ignored), as the rest of a sentence about the file; None: it fits."""
    model = {k: tuple(v.shape) for k, v in vit.state_dict().items()}
    shapes = {k: v for k, v in shapes.items() if not k.startswith(("head.", "fc_norm.")) or k in model}
    wrong = [k for k in model if k in shapes and shapes[k] != model[k]]
    if wrong:
        more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
        return (f"does not fit the model: size mismatch for {wrong[0]}: the file's {list(shapes[wrong[0]])}, "
                f"the model's {list(model[wrong[0]])}{more}")
    missing = [k for k in model if k not in shapes and not k.startswith("head.")]
    unexpected = [k for k in shapes if k not in model]
    if missing or unexpected:
        return (f"does not fit the model: missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
                f"unexpected {unexpected[:5]}")
    return None


#: where the arrays of a JAX checkpoint sit: the plain layout, the optimiser's target, big_vision's (as timm reads them)
_NPZ_PREFIXES = ("", "opt/target/", "params/", "params/img/")


def _npz_problem(vit: nn.Module, path: Path) -> str | None:
    """Why a JAX checkpoint (.npz) does not fit ``vit`` as it is, as the rest of a sentence about the file; None:
    it does. timm's loader would resample another patch size or position grid, adapt other input channels and
    load the first blocks of a deeper model, each without a word; a checkpoint must fit here as a .safetensors
    file must (the rest - widths, heads, missing arrays - fails in the loader itself)."""
    import numpy as np

    try:
        arrays = np.load(path)  # no pickles: a file that holds one is refused
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        return f"cannot be read as .npz: {err}"
    if not isinstance(arrays, np.lib.npyio.NpzFile):
        return "holds one array (.npy), not a .npz checkpoint"
    with arrays:
        prefix = next((p for p in _NPZ_PREFIXES if f"{p}embedding/kernel" in arrays), None)
        if prefix is None:
            return "does not fit the model: no 'embedding/kernel' array (not a ViT checkpoint in the JAX layout)"
        proj = vit.patch_embed.proj.weight
        pos = f"{prefix}pos_embedding" if f"{prefix}pos_embedding" in arrays else \
            f"{prefix}Transformer/posembed_input/pos_embedding"
        expected = {f"{prefix}embedding/kernel": (*proj.shape[2:], proj.shape[1], proj.shape[0]),
                    pos: tuple(vit.pos_embed.shape)}
        for key, shape in expected.items():
            found = tuple(arrays[key].shape) if key in arrays else None
            if found != shape:
                return "does not fit the model: " + (
                    f"no {key!r} array" if found is None else f"{key!r} has shape {found}, the model's {shape}")
        scanned = f"{prefix}Transformer/encoderblock/LayerNorm_0/scale"  # all blocks in one array (big_vision)
        one = re.compile(rf"{re.escape(prefix)}Transformer/encoderblock_\d+/LayerNorm_0/scale")
        blocks = arrays[scanned].shape[0] if scanned in arrays else sum(map(bool, map(one.fullmatch, arrays)))
    if blocks != len(vit.blocks):
        return f"does not fit the model: {blocks} encoder blocks, the model has {len(vit.blocks)}"
    return None


def _load_npz(vit: nn.Module, path: Path) -> None:
    from timm.models.vision_transformer import _load_weights

    def refuse(why: str) -> WeightsError:
        return WeightsError(f"backbone weights file {str(path)!r} does not fit the model: {why}")

    try:
        _load_weights(vit, str(path))
    except KeyError as err:  # numpy's message: "<key> is not a file in the archive"
        raise refuse(f"KeyError: {str(err.args[0]).removesuffix(' is not a file in the archive')!r}") from None
    except (ValueError, RuntimeError) as err:
        raise refuse(f"{type(err).__name__}: {str(err).splitlines()[-1].strip()}") from None


def weights_problem(path: str | Path, model: str, sha256: str | None = None) -> str | None:
    """Why the weights file ``path`` would not load into timm model ``model`` (a recorded model name, the tensors'
    names and shapes), read from the file's header or a memory map, the model built on torch's meta device: what
    :func:`load_backbone_weights` would refuse, as the rest of a sentence about the file, without loading either.
    With ``sha256`` (a pinned digest), a file that fits is read whole and its digest compared too. None: it fits."""
    path = Path(path).expanduser()
    if path.suffix not in WEIGHT_SUFFIXES:
        return _NOT_WEIGHTS
    with torch.device("meta"):
        vit = create_vit(model)
    try:
        if path.suffix == ".npz":
            problem = _npz_problem(vit, path)
        else:
            problem = _other_model(path, model) or _state_problem(vit, _weight_shapes(path))
    except _READ_ERRORS as err:
        return _unreadable(path, err)
    return problem or (_digest_problem(sha256_file(path), sha256) if sha256 else None)


def _digest_problem(digest: str, sha256: str | None) -> str | None:
    """The rest of a sentence about a weights file whose sha256 is not the pinned one."""
    return f"has sha256 {digest}, expected {sha256}" if sha256 is not None and digest != sha256 else None


#: the rest of a sentence about a file whose suffix names none of the formats read here
_NOT_WEIGHTS = f"is not a {'/'.join(WEIGHT_SUFFIXES)} file"

#: what reading a damaged or foreign weights file raises
_READ_ERRORS = (OSError, RuntimeError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile, SafetensorError)


def _unreadable(path: Path, err: BaseException) -> str:
    """The rest of a sentence about a weights file that ``err`` stopped reading."""
    first = str(err).splitlines()[0] if str(err) else ""
    return f"cannot be read as {path.suffix}: {type(err).__name__}: {first[:200]}"


def load_backbone_weights(vit: nn.Module, path: str | Path, sha256: str | None = None, model: str | None = None) -> str:
    """Load local weights into ``vit`` (classifier heads ignored); return the file's sha256. With ``model``, a
    file that records another timm model (the same architecture under other weights) is refused."""
    path = Path(path).expanduser()
    problem = file_problem("backbone weights file", str(path))
    if problem:
        raise WeightsError(problem)
    if path.suffix not in WEIGHT_SUFFIXES:
        raise WeightsError(f"backbone weights file {str(path)!r} {_NOT_WEIGHTS}")
    digest = sha256_file(path)
    problem = _digest_problem(digest, sha256)
    if problem:
        raise WeightsError(f"backbone weights file {str(path)!r} {problem}")
    state: dict[str, torch.Tensor] = {}
    try:
        problem = _other_model(path, model) if model else None
        if problem is None and path.suffix == ".npz":  # original JAX/big_vision checkpoints
            problem = _npz_problem(vit, path)
        elif problem is None:
            state = read_state_dict(path)
            problem = _state_problem(vit, {k: tuple(v.shape) for k, v in state.items()})
    except _READ_ERRORS as err:
        problem = _unreadable(path, err)
    if problem:
        raise WeightsError(f"backbone weights file {str(path)!r} {problem}")
    if path.suffix == ".npz":
        _load_npz(vit, path)
    else:
        keys = vit.state_dict().keys()
        vit.load_state_dict({k: v for k, v in state.items() if k in keys}, strict=False)  # a head it lacks: left out
    problem = _nonfinite_problem(vit)
    if problem:
        raise WeightsError(f"backbone weights file {str(path)!r} {problem}")
    return digest


def _nonfinite_problem(vit: nn.Module) -> str | None:
    """Why the loaded weights cannot be used: tensors holding NaN or Inf (every feature, hence every run on them,
    would be NaN, and the guard would blame the run's own rates), or None."""
    bad = [k for k, v in vit.state_dict().items() if nonfinite(v)]
    if not bad:
        return None
    more = f" (and {len(bad) - 1} more tensors)" if len(bad) > 1 else ""
    return f"holds non-finite values (NaN or Inf) in {bad[0]!r}{more}: it is not a trained backbone"


class FrozenViT(nn.Module):
    """A frozen timm ViT returning the final-LayerNorm [CLS] token, optionally with prefix prompts."""

    def __init__(self, vit: nn.Module, mean: tuple[float, ...], std: tuple[float, ...]):
        super().__init__()
        check_prefixable(vit.blocks)
        self.vit = vit.eval().requires_grad_(False)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)

    @property
    def embed_dim(self) -> int:
        return self.vit.embed_dim

    @property
    def depth(self) -> int:
        return len(self.vit.blocks)

    @property
    def num_heads(self) -> int:
        return self.vit.blocks[0].attn.num_heads

    def train(self, mode: bool = True) -> FrozenViT:
        # Frozen means frozen: no dropout / drop-path even while prompts train.
        super().train(False)
        return self

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        """The token sequence entering block 0 (normalised images, patch embedding, [CLS], positions)."""
        v = self.vit
        x = v.patch_embed((x - self.mean) / self.std)
        return v.norm_pre(v.patch_drop(v._pos_embed(x)))

    def forward(self, x: torch.Tensor, prefix: Prefix | None = None) -> torch.Tensor:
        """[CLS] after the final LayerNorm, with ``prefix[l]`` prepended in block ``l``'s attention."""
        if not prefix:
            return self.query(x)
        return self.cls_token(self.blocks_from(self.tokens(x), prefix))

    def cls_token(self, h: torch.Tensor) -> torch.Tensor:
        """[CLS] after the final LayerNorm of the last block's output ``h``."""
        return self.vit.norm(h)[:, 0]

    def blocks_from(self, h: torch.Tensor, prefix: Prefix, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """Blocks ``start..stop-1`` (default: to the last) on the token sequence ``h``, ``prefix[l]`` in block
        ``l``: a pass split in two (KA-Prompt's previous model reads its first blocks from a cache) is the
        same arithmetic as one :meth:`forward`."""
        for i in range(start, self.depth if stop is None else stop):
            h = block_with_prefix(self.vit.blocks[i], h, prefix.get(i))
        return h

    @torch.no_grad()
    def query(self, x: torch.Tensor, token: str = "cls") -> torch.Tensor:
        """[CLS] of the unprompted backbone: the query q(x) of prompt pools, and the plain feature (a function of
        frozen parts: no graph is recorded). ``token``: ``token1`` reads output token 1 instead (C-Prompt),
        ``patch_mean`` the mean of the patch tokens (KA-Prompt); both after the final LayerNorm, as the reference
        codes read them."""
        h = self.vit.norm(self.vit.blocks(self.tokens(x)))
        if token == "cls":
            return h[:, 0]
        if token == "token1":
            return h[:, 1]
        if token == "patch_mean":
            return h[:, self.vit.num_prefix_tokens:].mean(1)
        raise ValueError(f"query token {token!r}: expected cls, token1 or patch_mean")


def create_vit(model: str, num_classes: int = 0) -> nn.Module:
    """A randomly initialised timm model by name (ours or timm's), never downloading weights."""
    try:
        return timm.create_model(model, pretrained=False, num_classes=num_classes)
    except RuntimeError as e:
        raise ValueError(f"backbone model {model!r}: {e}") from None


def create_backbone(cfg: BackboneConfig, weights_path: str | Path) -> tuple[FrozenViT, str]:
    """Build the frozen backbone of ``cfg`` with weights from ``weights_path``; also return their sha256."""
    vit = create_vit(cfg.model)
    digest = load_backbone_weights(vit, weights_path, cfg.sha256 if not cfg.pretrained_here else None, model=cfg.model)
    return FrozenViT(vit, cfg.input_mean, cfg.input_std), digest
