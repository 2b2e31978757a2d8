"""The named configs and their descriptions, read without Hydra or the config classes.

`cadence list` needs only each YAML file's ``description``; reading it with PyYAML keeps
that command free of Hydra, OmegaConf and torch (composing a config lives in `loading`).
"""

from __future__ import annotations

from pathlib import Path

import yaml

NAMED_CONFIG_DIR = Path(__file__).parent / "named"


def named_config_paths(directory: Path = NAMED_CONFIG_DIR) -> list[Path]:
    """The YAML file of every named config in ``directory``, sorted by name."""
    return sorted(Path(directory).glob("*.yaml"))


def list_configs() -> dict[str, str]:
    """Every named config with its one-line description, sorted by name."""
    return {path.stem: _description(path) for path in named_config_paths()}


def _description(path: Path) -> str:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    tree = yaml.load(path.read_text(), Loader=loader)
    return str(tree.get("description", "")) if isinstance(tree, dict) else ""
