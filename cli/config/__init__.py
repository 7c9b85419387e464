"""The configuration of `pykubelet run`: the flags (flags.py), the --config file
(config_file.py), the flags laid over the file and validated (precedence.py); every failure a
ConfigurationError naming the input and the fix (errors.py)."""

from .config_file import ConfigFile, read_config_file
from .errors import EXIT_CONFIGURATION_ERROR, ConfigurationError, exit_on_configuration_error
from .flags import build_parser
from .precedence import LoadedConfiguration, build_configuration, load_configuration
from .root_dir import prepare_root_dir

__all__ = [
    "EXIT_CONFIGURATION_ERROR",
    "ConfigFile",
    "ConfigurationError",
    "LoadedConfiguration",
    "build_configuration",
    "build_parser",
    "exit_on_configuration_error",
    "load_configuration",
    "prepare_root_dir",
    "read_config_file",
]
