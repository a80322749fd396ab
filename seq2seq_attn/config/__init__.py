"""The experiment config: one YAML file with sections data, vocab, model, train, decode and eval.

`schema.py` defines every key (type, default, range, meaning); `loader.py` reads YAML, applies `--set`
overrides, validates and resolves paths; `reference.py` writes the key reference; `constants.py` names
the corpus splits and sides every stage shares. The names below are the ones the rest of the package
uses.
"""

from .loader import choices_enum, from_dict, load_config, override, to_dict, to_yaml
from .schema import (
    CleanConfig,
    Config,
    DataConfig,
    DecodeConfig,
    EvalConfig,
    HoldOutConfig,
    HuggingFaceConfig,
    LocalConfig,
    ModelConfig,
    Multi30kConfig,
    SplitFiles,
    SyntheticConfig,
    TrainConfig,
    VocabConfig,
)

__all__ = [
    "CleanConfig",
    "Config",
    "DataConfig",
    "DecodeConfig",
    "EvalConfig",
    "HuggingFaceConfig",
    "HoldOutConfig",
    "LocalConfig",
    "ModelConfig",
    "Multi30kConfig",
    "SplitFiles",
    "SyntheticConfig",
    "TrainConfig",
    "VocabConfig",
    "choices_enum",
    "from_dict",
    "load_config",
    "override",
    "to_dict",
    "to_yaml",
]
