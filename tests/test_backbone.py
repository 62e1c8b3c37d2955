"""Any timm ViT by name, with weights from a local file (checksum recorded and checked), never downloaded."""

import pytest
import timm
import torch
from safetensors.torch import save_file

from intact.settings import BackboneConfig
from intact.hashing import sha256_file
from intact.models.backbone import WeightsError, create_backbone, create_vit


@pytest.fixture(scope="module")
def vit_tiny_weights(tmp_path_factory):
    """A randomly initialised timm `vit_tiny_patch16_224` saved as a user's local weights would be."""
    root = tmp_path_factory.mktemp("weights")
    torch.manual_seed(0)
    vit = create_vit("vit_tiny_patch16_224", num_classes=1000)    # with a classifier head, like a hub checkpoint
    state = vit.state_dict()
    save_file({k: v.contiguous() for k, v in state.items()}, str(root / "vit_tiny.safetensors"))
    torch.save(state, root / "vit_tiny.pth")
    return root, vit


def _cfg(path, sha=None):
    return BackboneConfig(name="vit_tiny", model="vit_tiny_patch16_224", weights=str(path), sha256=sha,
                          input_mean=(0.0, 0.0, 0.0), input_std=(1.0, 1.0, 1.0))


@pytest.mark.parametrize("suffix", ["safetensors", "pth"])
def test_timm_vit_by_name_loads_local_weights(vit_tiny_weights, suffix):
    root, reference = vit_tiny_weights
    path = root / f"vit_tiny.{suffix}"
    backbone, digest = create_backbone(_cfg(path, sha256_file(path)), path)
    assert digest == sha256_file(path)
    x = torch.rand(2, 3, 224, 224)
    with torch.no_grad():
        expected = reference.forward_features(x)[:, 0]
        torch.testing.assert_close(backbone.query(x), expected)
    assert not any(p.requires_grad for p in backbone.parameters())


def test_wrong_checksum_and_missing_file_are_refused(vit_tiny_weights):
    root, _ = vit_tiny_weights
    path = root / "vit_tiny.safetensors"
    with pytest.raises(WeightsError, match="sha256"):
        create_backbone(_cfg(path, "0" * 64), path)
    with pytest.raises(WeightsError, match="does not exist"):
        create_backbone(_cfg(root / "nope.safetensors"), root / "nope.safetensors")


def test_weights_of_another_architecture_are_refused(vit_tiny_weights, tmp_path):
    small = create_vit("vit_digits_p8")
    save_file({k: v.contiguous() for k, v in small.state_dict().items()}, str(tmp_path / "digits.safetensors"))
    with pytest.raises(WeightsError, match="does not fit"):
        create_backbone(_cfg(tmp_path / "digits.safetensors"), tmp_path / "digits.safetensors")


def test_weights_holding_nan_or_inf_are_refused_at_load(vit_tiny_weights, tmp_path):
    """Before 2026-11-30 they loaded: every feature was NaN, and every run on them stopped at its first step, the
    guard blaming that run's own terms. The head a hub checkpoint carries (not loaded) is not checked."""
    root, reference = vit_tiny_weights
    state = {k: v.clone().contiguous() for k, v in reference.state_dict().items()}
    state["head.weight"][0, 0] = float("nan")           # not part of the backbone: loads
    save_file(state, str(tmp_path / "head_nan.safetensors"))
    create_backbone(_cfg(tmp_path / "head_nan.safetensors"), tmp_path / "head_nan.safetensors")
    state["blocks.3.mlp.fc1.weight"][5, 7] = float("nan")
    state["pos_embed"][0, 1, 2] = float("inf")
    save_file(state, str(tmp_path / "nan.safetensors"))
    with pytest.raises(WeightsError, match=r"nan.safetensors' holds non-finite values \(NaN or Inf\) in 'pos_embed' "
                       r"\(and 1 more tensors\): it is not a trained backbone"):
        create_backbone(_cfg(tmp_path / "nan.safetensors"), tmp_path / "nan.safetensors")


# ==== moved from tests/test_audit_fixes.py (issue 17): weights named for another model =========

# ---- item 1: a weights file is checked against the backbone it is named for --------------------------------

def test_a_weights_file_written_for_another_timm_model_is_refused(tmp_path):
    from safetensors.torch import save_file

    from intact.models.backbone import WeightsError, create_vit, load_backbone_weights

    path = tmp_path / "w.safetensors"
    save_file(create_vit("vit_digits_p8").state_dict(), str(path),
              metadata={"timm_model": "vit_base_patch16_224.augreg_in21k"})
    with pytest.raises(WeightsError, match=r"written for timm model 'vit_base_patch16_224.augreg_in21k', not "
                       r"'vit_digits_p8'"):
        load_backbone_weights(create_vit("vit_digits_p8"), path, model="vit_digits_p8")
    load_backbone_weights(create_vit("vit_digits_p8"), path)                 # no model named: not checked


# ---- issue 32: the authors' own in21k .pth (C-Prompt / KA-Prompt load it with strict=False) ------------------

def test_a_timm_keyed_pth_with_its_21k_head_loads_as_is_and_a_file_of_other_keys_is_refused(tmp_path):
    """The C-/KA-Prompt codes build ``vit_base_patch16_224.augreg_in21k`` with 21,843 classes and load their
    ``vit_base_p16_224_in22k.pth`` with ``strict=False``. A file in timm's keys (head included) is used here as
    is; a file in other keys (as transformers' ViT names them) is refused by name, where ``strict=False`` loads
    no tensor at all and keeps the random initialisation without a word (docs/protocols.md section 7)."""
    from intact.models.backbone import load_backbone_weights

    torch.manual_seed(1)
    authors = create_vit("vit_tiny_patch16_224", num_classes=21843)
    torch.save(authors.state_dict(), tmp_path / "vit_base_p16_224_in22k.pth")
    vit = create_vit("vit_tiny_patch16_224")
    load_backbone_weights(vit, tmp_path / "vit_base_p16_224_in22k.pth", model="vit_tiny_patch16_224")
    assert torch.equal(vit.state_dict()["blocks.0.attn.qkv.weight"], authors.state_dict()["blocks.0.attn.qkv.weight"])
    other = {f"vit.encoder.{k}": v for k, v in authors.state_dict().items()}
    torch.save(other, tmp_path / "other_keys.pth")
    fresh = create_vit("vit_tiny_patch16_224")
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    missing, unexpected = fresh.load_state_dict(torch.load(tmp_path / "other_keys.pth"), strict=False)
    assert len(unexpected) == len(other) and all(torch.equal(v, fresh.state_dict()[k]) for k, v in before.items())
    with pytest.raises(WeightsError, match="does not fit the model: missing"):
        load_backbone_weights(create_vit("vit_tiny_patch16_224"), tmp_path / "other_keys.pth")


# ---- the original JAX checkpoints (.npz) -----------------------------------------------------------------------

def _jax_npz(vit, path, drop=(), blocks=None, prefix=""):
    """``vit`` written in the layout of Google's original ViT checkpoints (the inverse of timm's ``_load_weights``:
    kernels input-major, attention kernels split by head), without the arrays named in ``drop``; ``blocks``
    writes only the first blocks; ``prefix`` before every name (``opt/target/``: a checkpoint with its optimiser)."""
    import numpy as np

    s = {k: v.detach().double().numpy() for k, v in vit.state_dict().items()}
    heads = vit.blocks[0].attn.num_heads
    w = {"embedding/kernel": s["patch_embed.proj.weight"].transpose(2, 3, 1, 0),
         "embedding/bias": s["patch_embed.proj.bias"], "cls": s["cls_token"],
         "Transformer/posembed_input/pos_embedding": s["pos_embed"],
         "Transformer/encoder_norm/scale": s["norm.weight"], "Transformer/encoder_norm/bias": s["norm.bias"]}
    for i in range(len(vit.blocks) if blocks is None else blocks):
        b, p = f"blocks.{i}.", f"Transformer/encoderblock_{i}/"
        dim = s[b + "attn.proj.weight"].shape[0]
        for j, n in enumerate(("query", "key", "value")):
            rows, mha = slice(j * dim, (j + 1) * dim), f"{p}MultiHeadDotProductAttention_1/{n}"
            w[f"{mha}/kernel"] = s[b + "attn.qkv.weight"][rows].T.reshape(dim, heads, -1)
            w[f"{mha}/bias"] = s[b + "attn.qkv.bias"][rows].reshape(heads, -1)
        w[f"{p}MultiHeadDotProductAttention_1/out/kernel"] = s[b + "attn.proj.weight"].T.reshape(heads, -1, dim)
        w[f"{p}MultiHeadDotProductAttention_1/out/bias"] = s[b + "attn.proj.bias"]
        for ln, norm in (("LayerNorm_0", "norm1"), ("LayerNorm_2", "norm2")):
            w[f"{p}{ln}/scale"], w[f"{p}{ln}/bias"] = s[f"{b}{norm}.weight"], s[f"{b}{norm}.bias"]
        for r in range(2):
            w[f"{p}MlpBlock_3/Dense_{r}/kernel"] = s[f"{b}mlp.fc{r + 1}.weight"].T
            w[f"{p}MlpBlock_3/Dense_{r}/bias"] = s[f"{b}mlp.fc{r + 1}.bias"]
    np.savez(path, **{prefix + k: v.astype(np.float32) for k, v in w.items() if k not in drop})
    return path


@pytest.mark.parametrize("prefix", ["", "opt/target/"])
def test_an_original_jax_checkpoint_loads_to_the_same_backbone(tmp_path, prefix):
    from intact.models.backbone import load_backbone_weights

    torch.manual_seed(2)
    source = create_vit("vit_digits_p8")
    torch.manual_seed(3)
    vit = create_vit("vit_digits_p8")
    path = _jax_npz(source, tmp_path / "ViT-digits.npz", prefix=prefix)
    assert load_backbone_weights(vit, path) == sha256_file(path)
    for key, value in source.state_dict().items():
        assert torch.equal(vit.state_dict()[key], value), key


@pytest.mark.parametrize("other, drop, blocks, problem", [
    # timm's loader would resample the 4x4 patches and the 65-token grid to the model's, sum the RGB kernels to
    # one channel and load the first 4 of 5 blocks, each without a word
    ("vit_digits_p4", (), None, r"'embedding/kernel' has shape \(4, 4, 1, 64\), the model's \(8, 8, 1, 64\)"),
    ("vit_rgb_p8", (), None, r"'embedding/kernel' has shape \(8, 8, 3, 64\), the model's \(8, 8, 1, 64\)"),
    ("vit_digits_p8_depth5", (), None, "5 encoder blocks, the model has 4"),
    ("vit_digits_p8", (), 3, "3 encoder blocks, the model has 4"),
    ("vit_digits_p8", ("Transformer/encoderblock_1/MlpBlock_3/Dense_0/bias",), None,
     "KeyError: 'Transformer/encoderblock_1/MlpBlock_3/Dense_0/bias'"),
    ("vit_digits_p8", ("embedding/kernel",), None, "no 'embedding/kernel' array"),
])
def test_a_jax_checkpoint_that_does_not_fit_is_refused_as_a_safetensors_file_is(tmp_path, other, drop, blocks,
                                                                                problem):
    from intact.models.backbone import load_backbone_weights

    source = timm.create_model("vit_digits_p8", depth=5) if other.endswith("_depth5") else create_vit(other)
    path = _jax_npz(source, tmp_path / "w.npz", drop, blocks)
    with pytest.raises(WeightsError, match=f"backbone weights file '{path}' does not fit the model: {problem}"):
        load_backbone_weights(create_vit("vit_digits_p8"), path)


def test_a_file_named_npz_that_is_not_a_checkpoint_is_refused_in_one_line(tmp_path):
    import numpy as np

    from intact.models.backbone import load_backbone_weights

    (tmp_path / "junk.npz").write_bytes(b"not an archive")
    with pytest.raises(WeightsError, match=r"'.*junk.npz' cannot be read as .npz: "):
        load_backbone_weights(create_vit("vit_digits_p8"), tmp_path / "junk.npz")
    with open(tmp_path / "one.npz", "wb") as f:    # np.save writes a single array whatever the name
        np.save(f, np.zeros(3))
    with pytest.raises(WeightsError, match=r"holds one array \(.npy\), not a .npz checkpoint"):
        load_backbone_weights(create_vit("vit_digits_p8"), tmp_path / "one.npz")


# ---- intact validate: a weights file's header, checked against its model before any job --------------------

def test_a_weights_files_header_tells_what_loading_it_would(vit_tiny_weights, tmp_path):
    """``weights_problem`` (what ``intact validate`` asks of each weights file) reads names and shapes only - the
    header, a memory map - on a model built on the meta device, and says what loading would refuse: for each
    file, None where the load succeeds, else the load's own message, word for word."""
    from intact.models.backbone import load_backbone_weights, weights_problem

    root, reference = vit_tiny_weights
    state = reference.state_dict()
    torch.save(state, tmp_path / "legacy.pth", _use_new_zipfile_serialization=False)   # cannot be memory-mapped
    save_file(create_vit("vit_digits_p8").state_dict(), str(tmp_path / "digits.safetensors"))
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "named.safetensors"),
              metadata={"timm_model": "vit_small_patch16_224"})
    (tmp_path / "junk.safetensors").write_bytes(b"not a header")
    (tmp_path / "junk.pth").write_bytes(b"not a pickle")
    (tmp_path / "vit.ckpt").write_bytes(b"a format not read here")
    _jax_npz(create_vit("vit_digits_p4"), tmp_path / "p4.npz")
    cases = {
        root / "vit_tiny.safetensors": ("vit_tiny_patch16_224", None),            # its 1000-class head ignored
        root / "vit_tiny.pth": ("vit_tiny_patch16_224", None),
        tmp_path / "legacy.pth": ("vit_tiny_patch16_224", None),
        tmp_path / "digits.safetensors": ("vit_tiny_patch16_224", "does not fit the model: size mismatch for "
                                          "cls_token: the file's [1, 1, 64], the model's [1, 1, 192] (and"),
        tmp_path / "named.safetensors": ("vit_tiny_patch16_224", "was written for timm model "
                                         "'vit_small_patch16_224', not 'vit_tiny_patch16_224'"),
        tmp_path / "junk.safetensors": ("vit_tiny_patch16_224", "cannot be read as .safetensors: SafetensorError: "),
        tmp_path / "junk.pth": ("vit_tiny_patch16_224", "cannot be read as .pth: UnpicklingError: "),
        tmp_path / "p4.npz": ("vit_digits_p8", "does not fit the model: 'embedding/kernel' has shape (4, 4, 1, 64)"),
        tmp_path / "vit.ckpt": ("vit_digits_p8", "is not a .safetensors/.pth/.pt/.bin/.npz file"),
    }
    for path, (model, problem) in cases.items():
        found = weights_problem(path, model)
        try:
            load_backbone_weights(create_vit(model), path, model=model)
            loaded = None
        except Exception as err:            # noqa: BLE001  (whatever the load raises is compared)
            loaded = err
        if problem is None:
            assert found is None and loaded is None, (path, found, loaded)
        else:
            assert found is not None and found.startswith(problem), (path, found)
            assert isinstance(loaded, WeightsError) and str(loaded) == f"backbone weights file '{path}' {found}", \
                (found, loaded)


def test_a_pinned_sha256_is_checked_before_any_job_as_the_load_checks_it(tmp_path):
    """``backbones.<b>.sha256`` (a file of the right shapes, but other weights: in21k for in1k) was checked only by
    the first job that loaded the file, on a cluster after its wait in the queue; the start-up check (``intact
    validate``, the workflow's main process) now reads a pinned file whole and says what the load would."""
    from intact.config import missing_weights
    from intact.hashing import sha256_file
    from intact.models.backbone import load_backbone_weights, weights_problem
    from intact.testing import tiny_config

    path = tmp_path / "digits.safetensors"
    save_file(create_vit("vit_digits_p8").state_dict(), str(path))
    right, wrong = sha256_file(path), "0" * 64
    assert weights_problem(path, "vit_digits_p8", right) is None
    found = weights_problem(path, "vit_digits_p8", wrong)
    assert found == f"has sha256 {right}, expected {wrong}"
    with pytest.raises(WeightsError) as err:
        load_backbone_weights(create_vit("vit_digits_p8"), path, wrong, model="vit_digits_p8")
    assert str(err.value) == f"backbone weights file '{path}' {found}"
    cfg = tiny_config()
    cfg["backbones"]["vit_digits"].update(weights=str(path), sha256=wrong)
    assert missing_weights(cfg, check_fit=True) == {
        "vit_digits": f"key 'backbones.vit_digits.weights': weights file '{path}' {found}"}
    cfg["backbones"]["vit_digits"]["sha256"] = right
    assert missing_weights(cfg, check_fit=True) == {} and missing_weights(cfg) == {}
