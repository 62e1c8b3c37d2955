"""Benchmark implementations whose module imports torch: ``impl/<name>.py`` holds type ``<name>``'s module-level
class, named by its torch-free declaration ``intact.data.<name>`` as ``"intact.data.impl.<name>:<Class>"`` (the
image benchmarks' classes import no torch at module level: they sit beside their declarations)."""
