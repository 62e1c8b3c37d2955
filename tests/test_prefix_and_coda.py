"""Prefix tuning inside timm attention, and the CODA-Prompt pool."""

import pytest
import torch
import torch.nn.functional as F

from intact.models.backbone import FrozenViT, create_vit
from intact.methods.impl.coda_p import CodaPromptPool, gram_schmidt_
from intact.models.prefix import prefix_attention


@pytest.fixture(scope="module")
def vit():
    torch.manual_seed(0)
    return FrozenViT(create_vit("vit_digits_p8"), (0.5,), (0.5,))


def test_zero_length_prefix_leaves_backbone_unchanged(vit):
    x = torch.rand(4, 1, 32, 32)
    ref = vit.vit.forward_features((x - 0.5) / 0.5)[:, 0]
    empty = torch.zeros(4, 0, vit.embed_dim)
    out = vit(x, {layer: (empty, empty) for layer in range(vit.depth)})
    assert torch.equal(out, ref)
    assert torch.equal(vit.query(x), ref)


def test_all_zero_coda_pool_gives_zero_prompts_which_still_take_attention_mass(vit):
    """An all-zero pool yields all-zero prompts; as zero-length prompts they leave the backbone exactly
    unchanged, but as length-L zero keys/values they do not (each zero key gets softmax weight exp(0)):
    prefix tuning has no 'off' value other than length zero."""
    pool = CodaPromptPool(vit.embed_dim, pool_size=4, length=8, layers=(0, 1), num_tasks=4)
    x = torch.rand(3, 1, 32, 32)
    q = vit.query(x)
    with torch.no_grad():
        prefix, _ = pool(q)
    assert all(float(k.abs().max()) == 0.0 and float(v.abs().max()) == 0.0 for k, v in prefix.values())
    zero_len = {l: (k[:, :0], v[:, :0]) for l, (k, v) in prefix.items()}
    assert torch.equal(vit(x, zero_len), q)
    assert not torch.allclose(vit(x, prefix), q)


def test_prefix_attention_matches_explicit_softmax(vit):
    attn = vit.vit.blocks[0].attn
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, vit.embed_dim, generator=g)
    pk, pv = torch.randn(2, 3, vit.embed_dim, generator=g), torch.randn(2, 3, vit.embed_dim, generator=g)
    out = prefix_attention(attn, x, pk, pv)
    B, N, D = x.shape
    H, hd = attn.num_heads, attn.head_dim
    q, k, v = attn.qkv(x).reshape(B, N, 3, H, hd).permute(2, 0, 3, 1, 4)
    k = torch.cat([pk.reshape(B, 3, H, hd).transpose(1, 2), k], 2)
    v = torch.cat([pv.reshape(B, 3, H, hd).transpose(1, 2), v], 2)
    a = (q @ k.transpose(-1, -2) * hd**-0.5).softmax(-1)
    ref = attn.proj((a @ v).transpose(1, 2).reshape(B, N, D))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_prefix_changes_output_and_only_prompted_layers(vit):
    x = torch.rand(2, 1, 32, 32)
    p = torch.randn(2, 4, vit.embed_dim)
    assert not torch.allclose(vit(x, {1: (p, p)}), vit.query(x))


def test_coda_attention_is_cosine_and_old_components_are_detached(vit):
    pool = CodaPromptPool(vit.embed_dim, pool_size=6, length=4, layers=(0,), num_tasks=3)
    g = torch.Generator().manual_seed(0)
    pool.begin_task(0, g)
    pool.begin_task(1, g)               # components 0-1 old, 2-3 trainable, 4-5 not yet used
    pool.train()
    q = torch.randn(5, vit.embed_dim)
    prefix, _ = pool(q)
    K, A, P = (t[:4] for t in (pool.keys["0"], pool.attn["0"], pool.prompts["0"]))
    alpha = F.cosine_similarity(q[:, None, :] * A[None], K[None], dim=2)
    expected = torch.einsum("bk,kld->bld", alpha, P)
    torch.testing.assert_close(torch.cat(prefix[0], 1), expected)
    (prefix[0][0].sum() + prefix[0][1].sum()).backward()
    grad = pool.prompts["0"].grad
    assert grad[:2].abs().sum() == 0 and grad[2:4].abs().sum() > 0 and grad[4:].abs().sum() == 0
    assert pool.keys["0"].grad[:2].abs().sum() == 0


def test_new_components_are_orthonormal_to_earlier_ones():
    t = torch.zeros(6, 10)
    g = torch.Generator().manual_seed(0)
    gram_schmidt_(t, 0, 2, g)
    gram_schmidt_(t, 2, 6, g)
    torch.testing.assert_close(t @ t.T, torch.eye(6), atol=1e-5, rtol=0)


def test_the_orthogonality_loss_is_codas_over_the_components_so_far_and_trains_only_the_current_ones(vit):
    """``methods.coda_p.ortho_mu`` > 0 (0 in the paper's configs, as in CODA-P's own): per prompted layer, mu times
    mean((T T^T - I)^2) of the keys, the attention vectors and the flattened prompts of the components so far; only
    in training, and only the current task's components receive its gradient."""
    mu = 0.5
    pool = CodaPromptPool(vit.embed_dim, pool_size=6, length=4, layers=(0, 2), num_tasks=3, ortho_mu=mu)
    g = torch.Generator().manual_seed(0)
    pool.begin_task(0, g)
    pool.begin_task(1, g)
    with torch.no_grad():                   # away from orthonormal, so the loss and its gradient are not zero
        for params in (pool.keys, pool.attn, pool.prompts):
            for p in params.values():
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    q = torch.randn(3, vit.embed_dim)
    pool.eval()
    assert pool(q)[1] == 0
    pool.train()
    _, aux = pool(q)

    def penalty(t):
        t = t[:4].detach().flatten(1)
        return ((t @ t.T - torch.eye(4)) ** 2).mean()
    expected = sum(mu * (penalty(pool.keys[k]) + penalty(pool.attn[k]) + penalty(pool.prompts[k])) for k in ("0", "2"))
    torch.testing.assert_close(aux, expected)
    aux.backward()
    for params in (pool.keys, pool.attn, pool.prompts):
        for p in params.values():
            assert p.grad[:2].abs().sum() == 0 and p.grad[2:4].abs().sum() > 0 and p.grad[4:].abs().sum() == 0
