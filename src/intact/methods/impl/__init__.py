"""The methods' implementations (they import torch): ``impl/<name>.py`` holds method ``<name>``'s module-level
class, with the network that is its own; its declaration, ``intact.methods.<name>`` (torch-free), names it as
``"intact.methods.impl.<name>:<Class>"``. What several methods share is in :mod:`intact.methods.shared` (the
families, the penalties) and :mod:`intact.models` (backbones, heads, prefix tuning, the shared prompt)."""
