"""Prefix attention on the CPU: ``F.scaled_dot_product_attention`` (what ``intact.models.prefix`` calls) against
the explicit ``softmax(q k^T / sqrt(d)) v`` of the authors' ``models/vit.py``, forward + backward, timed in
turn (one of each per round, so a change of load hits both alike). Shapes: ViT-B/16 at 224 px with an
8-token prefix, batch 8 (``--batch``, ``--prefix``, ``--tokens`` to change).

    python tools/attention_speed.py --threads 2 --rounds 12
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F


def _time(fn) -> float:
    t = time.perf_counter()
    fn().sum().backward()
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--tokens", type=int, default=197)
    p.add_argument("--prefix", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=12, help="timed rounds (after 2 warm-up rounds)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(a.batch, a.heads, a.tokens, a.head_dim, generator=g, requires_grad=True)
    k, v = (torch.randn(a.batch, a.heads, a.tokens + a.prefix, a.head_dim, generator=g,
                        requires_grad=True) for _ in "kv")
    scale = a.head_dim ** -0.5
    ways = {"sdpa (ours)": lambda: F.scaled_dot_product_attention(q, k, v),
            "explicit (authors')": lambda: ((q @ k.transpose(-2, -1)) * scale).softmax(-1) @ v}
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(a.rounds + 2):
        for name, fn in ways.items():
            times[name].append(_time(fn))
    print(f"one attention layer, forward + backward, batch {a.batch}, {a.tokens} + {a.prefix} tokens, "
          f"{a.threads} threads; load average {os.getloadavg()[0]:.1f}")
    for name, ts in times.items():
        ts = ts[2:]
        print(f"{name:22s} median {1e3 * statistics.median(ts):7.1f} ms  (min {1e3 * min(ts):.1f}, max "
              f"{1e3 * max(ts):.1f})")
    ratio = [x / y for x, y in zip(times["sdpa (ours)"][2:], times["explicit (authors')"][2:])]
    print(f"ours / authors' per round: median {statistics.median(ratio):.2f} (min {min(ratio):.2f}, max "
          f"{max(ratio):.2f})")


if __name__ == "__main__":
    main()
