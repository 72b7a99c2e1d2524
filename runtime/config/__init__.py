"""The ``train`` configuration: one typed YAML file, validated before anything starts.

Every section is a pydantic model with ``extra="forbid"``, so a misspelt key is an error, not a
silent default. ``load_config`` turns any problem into one ``ConfigFileError`` whose message
names the file and each bad field (``rollout.temperature: must be > 0 (got -1)``). With no file,
``TrainConfig()`` is the embedded default (``configs/demo.yaml`` spells the same values out).

Two modules, one name space (every name below imports from ``runtime.config``): ``schema``
(the sections and ``TrainConfig``) and ``files`` (YAML and ``--set`` into a ``TrainConfig``:
the YAML-bomb guard, duplicate keys, old key names). What only this machine can answer
(device, precision, world size, vLLM's engine arguments, prompt lengths) is
``runtime.machine_checks``, imported from there: it reads a ``TrainConfig``, so this package
does not import it back (no import circle).
"""


from reserve_occupy.config import MAX_STALENESS
from reserve_occupy.trace import MAX_JSON_DEPTH

from ..peers import POLICY_CHOICES, RESERVE_OCCUPY, peer_streams, unhonoured
from ..records import DriverSettings
from .files import (
    MAX_CONFIG_BYTES,
    MAX_YAML_VALUES,
    NAME_SETTINGS,
    PATH_SETTINGS,
    RENAMED_KEYS,
    ConfigFileError,
    _check_duplicates,
    _check_expansion,
    _check_texts,
    _deprecated,
    _describe,
    _rename_keys,
    _stderr,
    load_config,
    parse_override,
    safe_yaml,
)
from .schema import (
    check_token_budget,
    CORRECTION_OPTIONS,
    DEFAULT_CAP,
    DEFAULT_HIGH,
    DEFAULT_LOW,
    MAX_CANDIDATES,
    MAX_COLLECTIVE_TIMEOUT_S,
    MAX_ETA,
    MAX_GROUPS,
    MAX_SEED,
    MAX_TINY_HIDDEN,
    MAX_TINY_LAYERS,
    MAX_TINY_PARAMS,
    MAX_WORLD,
    CorrectionConfig,
    DataConfig,
    ModelConfig,
    RayConfig,
    RecoveryConfig,
    RewardConfig,
    RolloutConfig,
    RunConfig,
    StalenessConfig,
    TimeoutConfig,
    TinyModelConfig,
    TrainConfig,
    TrainerConfig,
    _check_bool,
    _check_number,
    _finite_mapping,
    _non_finite,
    _Section,
)
from .._moved import renamed

__all__ = [
    "CORRECTION_OPTIONS", "DEFAULT_CAP", "DEFAULT_HIGH", "DEFAULT_LOW", "MAX_CANDIDATES",
    "MAX_COLLECTIVE_TIMEOUT_S", "MAX_CONFIG_BYTES", "MAX_ETA", "MAX_GROUPS", "MAX_JSON_DEPTH",
    "MAX_SEED", "MAX_STALENESS", "MAX_TINY_HIDDEN", "MAX_TINY_LAYERS", "MAX_TINY_PARAMS",
    "MAX_WORLD", "MAX_YAML_VALUES", "NAME_SETTINGS", "PATH_SETTINGS", "POLICY_CHOICES",
    "RENAMED_KEYS", "RESERVE_OCCUPY",
    "ConfigFileError", "CorrectionConfig", "DataConfig", "DriverSettings", "ModelConfig",
    "RayConfig", "RecoveryConfig", "RewardConfig", "RolloutConfig", "RunConfig",
    "StalenessConfig", "TimeoutConfig", "TinyModelConfig", "TrainConfig", "TrainerConfig",
    "check_token_budget", "load_config", "parse_override", "peer_streams",
    "safe_yaml", "unhonoured",
    # private helpers, importable here as before the split
    "_Section", "_check_bool", "_check_duplicates", "_check_expansion", "_check_number",
    "_check_texts", "_deprecated", "_describe", "_finite_mapping", "_non_finite",
    "_rename_keys", "_stderr",
]


# ``REFERENCE``, the old name of ``RESERVE_OCCUPY`` here (the word also named other things), kept
# for one release; it warns (``DeprecationWarning``)
__getattr__ = renamed(__name__, {"REFERENCE": "RESERVE_OCCUPY"}, globals())
