"""The Config fields the C core reads are declared by Config itself: the gunicorn worker
sets documented fields, never attributes a fresh Config does not have."""

import ast
from pathlib import Path

from pyserver.config import Config

WORKERS = Path(__file__).resolve().parent.parent / "pyserver" / "workers.py"


def test_supervision_fields_have_defaults():
    config = Config("apps.basic:app")
    assert config.on_tick is None
    assert config.on_stop_signal is None
    assert config.tick_interval == 1.0
    assert config.secure_scheme_headers is None
    assert config.loaded_app is None


def test_gunicorn_worker_sets_only_declared_fields():
    declared = set(vars(Config("apps.basic:app")))
    assigned = set()
    for node in ast.walk(ast.parse(WORKERS.read_text())):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "config"
                ):
                    assigned.add(target.attr)
    assert assigned, "no config.X = ... found in pyserver/workers.py"
    assert assigned <= declared, sorted(assigned - declared)
