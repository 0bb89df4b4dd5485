"""Logging setup: the pyserver.error and pyserver.access loggers.

The default configuration prints server messages to stderr as gunicorn does,
"[2026-12-01 10:00:00 +0000] [1234] [INFO] message" (time, pid, level), and access
lines to stdout ("INFO:     127.0.0.1:5000 - ..." in the default format; a format the user
gives is written as it is). --error-logfile/--access-logfile
send them to files instead (reopened on USR1). --log-config replaces or
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


class AccessFields(dict):
    """The message of a JSON access record: the request's fields, whose str() is the JSON line.

    A handler that writes %(message)s writes the JSON line; a structured formatter
    (python-json-logger) takes a dict message as the record's fields, so they are
    encoded once, not again as a JSON string inside JSON."""

    __slots__ = ("line",)

    def __str__(self):
        return self.line


LOGGING_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "default": {
            "format": "[%(asctime)s] [%(process)d] [%(levelname)s] %(message)s",
            "datefmt": "%Y-%m-%d %H:%M:%S %z",
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


def _file_handler(path, stream_name, formatter):
    """A handler for --access-logfile/--error-logfile: '-' is the standard stream."""
    if path == "-":
        import sys

        handler = logging.StreamHandler(getattr(sys, stream_name))
    else:
        try:
            handler = logging.FileHandler(path, encoding="utf-8")
        except OSError as exc:
            raise LogConfigError(f"cannot open log file {path}: {exc}") from exc
    handler.setFormatter(formatter)
    return handler


def configure_logging(
    log_level="info",
    log_config=None,
    access_log=True,
    access_logfile=None,
    error_logfile=None,
    access_bare=False,
):
    """Set up pyserver's loggers; return (error_logger, access_logger).

    The defaults go first, then the user's file, then --log-level, so a file
    can restyle the output while --log-level still decides what is shown.
    Access lines of a format the user gave (access_bare: --access-logformat, JSON lines) are
    written exactly as formatted, as gunicorn writes them, so log parsers read them.
    """
    defaults = copy.deepcopy(LOGGING_CONFIG)
    if access_bare:
        defaults["formatters"]["access"] = {"format": "%(message)s"}
    logging.config.dictConfig(defaults)
    for path, name, stream in (
        (error_logfile, ERROR_LOGGER, "stderr"),
        (access_logfile, ACCESS_LOGGER, "stdout"),
    ):
        if path is not None:
            logger = logging.getLogger(name)
            handler = _file_handler(path, stream, logger.handlers[0].formatter)
            logger.handlers = [handler]
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


def stream_writer(logger, fallback_level):
    """A write(text) for wsgi.errors: the text goes as it comes (no prefix, no time, its own
    line ends) to the streams of logger's handlers, as gunicorn writes it, flushed at once.
    Handlers without a stream (syslog, a queue) get it as a record at fallback_level."""

    def write(text):
        streams = [
            handler
            for handler in logger.handlers
            if isinstance(handler, logging.StreamHandler) and handler.stream is not None
        ]
        if not streams:
            if text.strip():
                logger.log(fallback_level, "%s", text.rstrip())
            return
        for handler in streams:
            handler.acquire()
            try:
                handler.stream.write(text)
                handler.stream.flush()
            except (OSError, ValueError):
                pass
            finally:
                handler.release()

    return write
