"""The Config fields the C core reads are declared by Config itself: the gunicorn worker
sets documented fields, never attributes a fresh Config does not have."""

import ast
import re
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


CSRC_PY = Path(__file__).resolve().parent.parent / "csrc" / "py"
# Every Config read in settings.c goes through a helper called as
# helper(config, "name", ...).
CONFIG_READ = re.compile(r'\(config, "([A-Za-z_][A-Za-z0-9_]*)"')


def test_settings_c_reads_only_declared_fields():
    read = set(CONFIG_READ.findall((CSRC_PY / "settings.c").read_text()))
    declared = {name for name in vars(Config("apps.basic:app")) if not name.startswith("_")}
    assert len(read) > 30, sorted(read)
    assert read <= declared, sorted(read - declared)
    # The one attribute access of settings.c is its get_obj helper.
    assert (CSRC_PY / "settings.c").read_text().count("GetAttr") == 1


def test_no_other_bridge_file_reads_config():
    for path in sorted(CSRC_PY.glob("*.c")):
        if path.name == "settings.c":
            continue
        text = path.read_text()
        assert not CONFIG_READ.search(text), path.name
        assert not re.search(r"GetAttr\w*\(config\b", text), path.name
        assert not re.search(r"HasAttr\w*\(config\b", text), path.name
