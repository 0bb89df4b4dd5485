"""Logging setup: the pyserver.error and pyserver.access loggers.

The default configuration prints uvicorn-style lines ("INFO:     message"):
server messages to stderr, access lines to stdout. --log-config replaces or
extends it with a dictConfig file (.json, .yaml/.yml) or a fileConfig file
(.ini and anything else).
"""

import copy
import json
import logging
import logging.config
import os

TRACE = 5
logging.addLevelName(TRACE, "TRACE")

LOG_LEVELS = {
    "critical": logging.CRITICAL,
    "error": logging.ERROR,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
    "trace": TRACE,
}

ERROR_LOGGER = "pyserver.error"
ACCESS_LOGGER = "pyserver.access"


class DefaultFormatter(logging.Formatter):
    """Adds %(levelprefix)s: "INFO:" padded so that messages line up."""

    def formatMessage(self, record):  # noqa: N802 (logging's own name)
        record.levelprefix = (record.levelname + ":").ljust(9)
        return super().formatMessage(record)


LOGGING_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "default": {
            "()": "pyserver.logconfig.DefaultFormatter",
            "fmt": "%(levelprefix)s %(message)s",
        },
        "access": {
            "()": "pyserver.logconfig.DefaultFormatter",
            "fmt": "%(levelprefix)s %(message)s",
        },
    },
    "handlers": {
        "default": {
            "formatter": "default",
            "class": "logging.StreamHandler",
            "stream": "ext://sys.stderr",
        },
        "access": {
            "formatter": "access",
            "class": "logging.StreamHandler",
            "stream": "ext://sys.stdout",
        },
    },
    "loggers": {
        ERROR_LOGGER: {"handlers": ["default"], "level": "INFO", "propagate": False},
        ACCESS_LOGGER: {"handlers": ["access"], "level": "INFO", "propagate": False},
    },
}


class LogConfigError(Exception):
    """The --log-config file could not be read or applied."""


def load_config_file(path):
    """Apply a logging configuration file, chosen by its extension."""
    ext = os.path.splitext(path)[1].lower()
    try:
        if ext == ".json":
            with open(path, encoding="utf-8") as f:
                logging.config.dictConfig(json.load(f))
        elif ext in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise LogConfigError(
                    f"{path}: YAML log configs need PyYAML (pip install pyyaml)"
                ) from None
            with open(path, encoding="utf-8") as f:
                logging.config.dictConfig(yaml.safe_load(f))
        else:
            if not os.path.exists(path):
                raise FileNotFoundError(2, "No such file or directory", path)
            logging.config.fileConfig(path, disable_existing_loggers=False)
    except LogConfigError:
        raise
    except Exception as exc:
        raise LogConfigError(f"cannot apply log config {path}: {exc}") from exc


def configure_logging(log_level="info", log_config=None, access_log=True):
    """Set up pyserver's loggers; return (error_logger, access_logger).

    The defaults go first, then the user's file, then --log-level, so a file
    can restyle the output while --log-level still decides what is shown.
    """
    logging.config.dictConfig(copy.deepcopy(LOGGING_CONFIG))
    if log_config is not None:
        load_config_file(log_config)
    level = LOG_LEVELS[log_level] if isinstance(log_level, str) else log_level
    error_logger = logging.getLogger(ERROR_LOGGER)
    access_logger = logging.getLogger(ACCESS_LOGGER)
    error_logger.setLevel(level)
    access_logger.setLevel(level)
    if not access_log:
        access_logger.handlers = []
        access_logger.propagate = False
    return error_logger, access_logger
