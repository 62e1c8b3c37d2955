"""The configuration error (a leaf module: every layer that checks settings raises it)."""


class ConfigError(ValueError):
    """Invalid configuration: the message names the key or file and what was expected."""
