"""Settings of the image benchmarks (DomainNet, ImageNet-R, ImageNet-C, ImageNet-Mix): no torch here.

:class:`ImageBenchmarkConfig` holds every key of the family, in the order finished runs recorded them (their
hashes hold it); each type's settings (``intact/data/<type>.py``) subclass it and declare again, with
:func:`~intact.settings.setting`, the keys that type takes (its roots, its ``split``), with that type's description
and default. A key a type does not take stays ``settable=False``: no config key, recorded as null.
The Snakefile reads task counts and data roots from these at start-up, so this module imports only
the standard library. The paper's task orders follow ``docs/protocols.md`` section 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar
from pathlib import Path

from intact.data.declare import BenchmarkSettings, settable
from intact.paths import expand_path, missing_path
from intact.settings import recorded, setting

#: the paper's task orders (each type's declaration names its own)
DOMAINNET = ("real", "quickdraw", "painting", "sketch", "infograph", "clipart")
IMAGENET_R = ("art", "cartoon", "deviantart", "graffiti", "embroidery", "graphic", "origami", "painting",
              "misc", "sticker", "sculpture", "sketch", "tattoo", "toy", "videogame")
IMAGENET_C = ("defocus_blur", "glass_blur", "motion_blur", "zoom_blur", "contrast", "elastic_transform",
              "jpeg_compression", "pixelate", "spatter", "speckle_noise", "gaussian_noise", "shot_noise",
              "fog", "frost", "snow")
#: ImageNet-Mix alternates C and R: c_defocus_blur, r_art, c_glass_blur, r_cartoon, ...
IMAGENET_MIX = tuple(name for pair in zip((f"c_{c}" for c in IMAGENET_C),
                                          (f"r_{r}" for r in IMAGENET_R)) for name in pair)
#: ImageNet-Mix's C tasks: ``authors`` (default) as the authors' ImageNet_CR dataset treats all 30 tasks -
#: Resize(224) + CenterCrop(224) + flip, the raw 224-px image (so the query cache covers them); ``imagenet_c``
#: as ImageNet-C alone: Resize(230) + a random 224 crop (test: centre crop), which has no finite set of variants
C_TRANSFORMS = ("authors", "imagenet_c")
#: the validation part of an image benchmark (eval_split val, studies.tune): a fraction of each class of each
#: task's train list (the same fraction as digits' val_fraction), drawn per task - see intact.data.prepared.val_rows
VAL_FRACTION = 0.2


def val_count(fraction: float, n: int) -> int:
    """How many of a class's ``n`` training images of a task the validation part takes: round(fraction * n), at
    most n - 1 (a class always keeps a training image)."""
    return min(int(round(fraction * n)), n - 1)


#: the image benchmarks' images are RGB: each type declares it, so that validation checks its backbone's input
#: channels and size (intact.checks)
CHANNELS = 3

#: the keys that hold an image root
ROOT_KEYS = ("root", "root_r", "root_c")


@dataclass(frozen=True)
class ImageBenchmarkConfig(BenchmarkSettings):
    """The keys of every image benchmark: a type's settings subclass this and take its roots, which are not settable
    here, by declaring them again."""

    domains: tuple[str, ...] = setting((), "the task sequence (default: the paper's order)", minItems=1)
    image_size: int = setting(224, "network input side (the protocol: 224)", minimum=8)
    root: str | None = setting(None, "the image root", settable=False)
    root_r: str | None = setting(None, "the ImageNet-R root", settable=False)
    root_c: str | None = setting(None, "the ImageNet-C root", settable=False)
    split: str | None = setting(None, "a split the type ships or a folder with the user's lists; $VARS expand",
                                minLength=1)
    skip_unreadable: bool = setting(False, "skip (and list in the manifest) images that cannot be decoded")
    c_transform: str | None = setting(None, "how ImageNet-Mix's C tasks are transformed", later=True, settable=False)
    val_fraction: float = setting(VAL_FRACTION, "of each class of a task's train list: the validation part (eval_split "
                                  "val)", exclusiveMinimum=0, exclusiveMaximum=1, later=True)
    val_seed: int = setting(0, "seeds the validation part's draw (with the task's name)", minimum=0,
                            later=True)

    #: applied when a run reads the prepared data, not when it is prepared (the prepare job's params omit them)
    read_keys: ClassVar[tuple[str, ...]] = ("val_fraction", "val_seed")

    @property
    def split_name(self) -> str:
        return self.split or self.declaration.splits[0]

    def roots(self) -> dict[str, str]:
        """Config key -> expanded path of every image root this benchmark reads."""
        keys = [k for k in ROOT_KEYS if k in settable(type(self))]
        return {k: expand_path(getattr(self, k)) for k in keys if getattr(self, k)}

    def missing_inputs(self) -> list[str]:
        """Messages for roots (and a user's split folder) that are not there: empty when all exist."""
        out = [f"key 'benchmarks.{self.name}.{k}': " + missing_path("data root", getattr(self, k))
               for k, p in self.roots().items() if not p or not Path(p).is_dir()]
        split, shipped = self.split_name, self.declaration.splits
        if split not in shipped and not Path(expand_path(split)).is_dir():
            out.append(f"key 'benchmarks.{self.name}.split' = {split!r}: neither a split of this type "
                       f"({', '.join(shipped)}) nor an existing folder of split lists")
        return out


def prepare_settings(cfg: ImageBenchmarkConfig) -> dict:
    """What preparing a benchmark depends on: its recorded settings (:func:`intact.settings.recorded`) without
    its ``read_keys`` (a new validation setting never re-decodes the images)."""
    return {k: v for k, v in recorded(cfg).items() if k not in cfg.read_keys}
