"""The benchmark registry: ``type`` in config.yaml -> implementation, resolved lazily (no torch at import)."""

from __future__ import annotations

from intact.registry import load_target, resolve

BENCHMARKS: dict[str, str] = {
    "digits": "intact.data.digits:DigitsBenchmark",
    "domainnet": "intact.data.domainnet:DomainNet",
    "imagenet_r": "intact.data.imagenet_r:ImageNetR",
    "imagenet_c": "intact.data.imagenet_c:ImageNetC",
    "imagenet_mix": "intact.data.imagenet_mix:ImageNetMix",
}


def benchmark_class(kind: str) -> type:
    """Import and return the benchmark class registered as ``kind``."""
    return load_target(resolve(BENCHMARKS, kind, "benchmark type"))


def open_benchmark(manifest_path):
    """Open a prepared benchmark from its ``manifest.json`` (the type is read from the manifest)."""
    from intact.io import read_json

    return benchmark_class(read_json(manifest_path)["type"])(manifest_path)
