"""Settings of the image benchmarks (DomainNet, ImageNet-R, ImageNet-C, ImageNet-Mix): no torch here.

The Snakefile reads task counts and data roots from these at start-up, so this module imports only
the standard library. Task orders and class counts follow ``docs/protocols.md`` section 1.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

#: benchmark type -> the paper's task order
DOMAINNET = ("real", "quickdraw", "painting", "sketch", "infograph", "clipart")
IMAGENET_R = ("art", "cartoon", "deviantart", "graffiti", "embroidery", "graphic", "origami", "painting",
              "misc", "sticker", "sculpture", "sketch", "tattoo", "toy", "videogame")
IMAGENET_C = ("defocus_blur", "glass_blur", "motion_blur", "zoom_blur", "contrast", "elastic_transform",
              "jpeg_compression", "pixelate", "spatter", "speckle_noise", "gaussian_noise", "shot_noise",
              "fog", "frost", "snow")
#: ImageNet-Mix alternates C and R: c_defocus_blur, r_art, c_glass_blur, r_cartoon, ...
IMAGENET_MIX = tuple(name for pair in zip((f"c_{c}" for c in IMAGENET_C), (f"r_{r}" for r in IMAGENET_R)) for name in pair)

TASK_ORDERS: dict[str, tuple[str, ...]] = {
    "domainnet": DOMAINNET, "imagenet_r": IMAGENET_R, "imagenet_c": IMAGENET_C, "imagenet_mix": IMAGENET_MIX,
}
NUM_CLASSES = {"domainnet": 345, "imagenet_r": 200, "imagenet_c": 200, "imagenet_mix": 200}
#: the split a type uses when ``split`` is not set (DomainNet: the official lists in the data root)
DEFAULT_SPLIT = {"domainnet": "official", "imagenet_r": "coda", "imagenet_c": "ka", "imagenet_mix": "ka"}
#: the split names each type ships (anything else is the path of a folder with the user's own lists)
SHIPPED_SPLITS = {"domainnet": ("official",), "imagenet_r": ("coda", "ka"), "imagenet_c": ("ka",), "imagenet_mix": ("ka",)}
IMAGE_TYPES = tuple(TASK_ORDERS)
#: ImageNet-Mix's C tasks: ``authors`` (default) as the authors' ImageNet_CR dataset treats all 30 tasks -
#: Resize(224) + CenterCrop(224) + flip, the raw 224-px image (so the query cache covers them); ``imagenet_c``
#: as ImageNet-C alone: Resize(230) + a random 224 crop (test: centre crop), which has no finite set of variants
C_TRANSFORMS = ("authors", "imagenet_c")
#: the validation part of an image benchmark (eval_split val, studies.tune): a fraction of each class of each
#: task's train list (the same fraction as digits' val_fraction), drawn per task - see intact.data.stored.val_rows
VAL_FRACTION = 0.2

#: optional keys left out of a config's plain form while unset (None), so existing runs keep their hashes
UNSET_KEYS = ("c_transform",)


def expand_path(value: str) -> str:
    """``~`` and ``$VARS`` expanded: data roots and weights may come from the environment."""
    return os.path.expanduser(os.path.expandvars(value))


def missing_path(what: str, raw: str) -> str:
    """"<what> '<raw>' (= expanded) does not exist", naming environment variables in it that are unset or empty."""
    path = expand_path(raw)
    text = f"{what} {raw!r}" + (f" (= {path!r})" if path != raw else "") + " does not exist"
    unset = [v for v in re.findall(r"\$\{?(\w+)\}?", raw) if not os.environ.get(v)]
    return text + (f" (environment variable {', '.join('$' + v for v in unset)} is not set)" if unset else "")


@dataclass(frozen=True)
class ImageBenchmarkConfig:
    """A benchmark of real images read from a local root through split lists.

    ``root`` holds the images (``root_r`` / ``root_c`` for ImageNet-Mix); ``split`` names a shipped
    split (``coda`` / ``ka``), DomainNet's ``official`` lists, or a folder with the user's own lists.
    """

    name: str
    type: str
    backbone: str
    domains: tuple[str, ...] = ()
    image_size: int = 224
    root: str | None = None
    root_r: str | None = None
    root_c: str | None = None
    split: str | None = None
    skip_unreadable: bool = False
    c_transform: str | None = None   #: ImageNet-Mix only (:data:`C_TRANSFORMS`); None there means ``authors``
    val_fraction: float = VAL_FRACTION  #: the validation part's share of each class of a task's train list
    val_seed: int = 0                   #: seeds the validation part's draw (with the task's name)

    def __post_init__(self) -> None:
        if self.type == "imagenet_mix" and self.c_transform is None:
            object.__setattr__(self, "c_transform", "authors")  # explicit, so it is part of the run's hash

    @property
    def tasks(self) -> tuple[str, ...]:
        """The task sequence: ``domains`` if set, else the paper's order."""
        return self.domains or TASK_ORDERS[self.type]

    @property
    def num_tasks(self) -> int:
        return len(self.tasks)

    @property
    def num_classes(self) -> int:
        return NUM_CLASSES[self.type]

    @property
    def split_name(self) -> str:
        return self.split or DEFAULT_SPLIT[self.type]

    def roots(self) -> dict[str, str]:
        """Config key -> expanded path of every image root this benchmark reads."""
        keys = ("root_r", "root_c") if self.type == "imagenet_mix" else ("root",)
        return {k: expand_path(getattr(self, k)) for k in keys if getattr(self, k)}

    def missing_inputs(self) -> list[str]:
        """Messages for roots (and a user's split folder) that are not there: empty when all exist."""
        out = [f"key 'benchmarks.{self.name}.{k}': " + missing_path("data root", getattr(self, k))
               for k, p in self.roots().items() if not p or not Path(p).is_dir()]
        split = self.split_name
        if split not in SHIPPED_SPLITS[self.type] and not Path(expand_path(split)).is_dir():
            out.append(f"key 'benchmarks.{self.name}.split' = {split!r}: neither a split of this type "
                       f"({', '.join(SHIPPED_SPLITS[self.type])}) nor an existing folder of split lists")
        return out


#: keys applied when a run reads the prepared data, not when it is prepared (the prepare job's params omit them)
READ_KEYS = ("val_fraction", "val_seed")


def prepare_settings(cfg: ImageBenchmarkConfig) -> dict:
    """What preparing a benchmark depends on: :func:`plain_config` without :data:`READ_KEYS` (a new
    validation setting never re-decodes the images)."""
    return {k: v for k, v in plain_config(cfg).items() if k not in READ_KEYS}


def plain_config(cfg: object) -> dict:
    """A benchmark (or any dataclass) config as a plain dict, without :data:`UNSET_KEYS` that are None."""
    out = asdict(cfg)  # type: ignore[call-overload]
    return {k: v for k, v in out.items() if not (k in UNSET_KEYS and v is None)}
