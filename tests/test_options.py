"""The option table (pyserver/options.py) is the one source of every option: each one can be
set by its flag, its environment variable, a -c file and [tool.pyserver], and reaches Config
the same way from all four; gunicorn's setting names in a -c file mean what they say; the
option tables of docs/configuration.md are the ones the table makes. In-process for the
parametrized checks over the whole table (cli.parse_args is what `pyserver` runs), plus one
real server reading three sources at once."""

import json
import textwrap

import pytest
from helpers import ROOT, fetch, raw_request, run_cli, run_server

from pyserver import cli, options
from pyserver.config import Config

# A value of each option that is not its default, as typed on the command line, where the
# option's type alone does not give one.
TEXT_SAMPLES = {
    "host": "127.0.0.2",
    "bind": "127.0.0.1:9999",
    "proxy_protocol_bind": "127.0.0.1:9999",
    "uds": "/tmp/pyserver-options.sock",
    "uds_perms": "660",
    "umask": "027",
    "env": "KEY=VALUE",
    "asgi_app": "apps.asgi_basic:app",
    "asgi_paths": "/events",
    "app_dir": "apps",
    "root_path": "/mount",
    "ssl_certfile": "cert.pem",
    "ssl_keyfile": "key.pem",
    "ssl_keyfile_password": "secret",
    "ssl_ca_certs": "ca.pem",
    "ssl_cert_reqs": "required",
    "ssl_ciphers": "ECDHE+AESGCM",
    "ssl_version": "TLSv1.3",
    "hsts": "60",
    "redirect_http": "127.0.0.1:9997",
    "static": "/static=/tmp",
    "health_check_path": "/healthz",
    "compress_types": "text/html",
    "forwarded_allow_ips": "10.0.0.0/8",
    "metrics_bind": "127.0.0.1:9998",
    "ws_per_message_deflate": "false",
    "log_config": "logging.json",
    "access_log_format": "%(h)s %(s)s",
    "access_logfile": "access.log",
    "error_logfile": "error.log",
    "pid": "pyserver.pid",
    "user": "0",
    "group": "0",
    "chdir": "/tmp",
    "reload_dirs": "src",
    "reload_includes": "*.html",
}
# What an option needs beside it to be accepted, as command-line words.
COMPANIONS = {
    "asgi_paths": ["--asgi-app", "apps.asgi_basic:app"],
    "ssl_keyfile": ["--ssl-certfile", "cert.pem"],
    "ssl_ca_certs": ["--ssl-certfile", "cert.pem"],
    "hsts": ["--ssl-certfile", "cert.pem"],
    "redirect_http": ["--ssl-certfile", "cert.pem"],
}
CONFIG_OPTIONS = [opt for opt in options.OPTIONS if opt.config]


def sample_text(opt):
    """The option's sample as command-line text (None for a flag or switch)."""
    if opt.name in TEXT_SAMPLES:
        return TEXT_SAMPLES[opt.name]
    if opt.kind in ("flag", "switch"):
        return None
    if opt.choices is not None:
        return next(choice for choice in opt.choices if choice != opt.default)
    assert opt.bounds is not None, f"{opt.name}: add a sample to TEXT_SAMPLES"
    lo, hi = opt.bounds
    if opt.type is float:
        candidates = [lo + 1.5, lo + 0.25]
    else:
        candidates = [lo + 1, lo, hi]
    value = next(v for v in candidates if v != opt.default and (hi is None or v <= hi))
    return str(value)


def sample_value(opt):
    """The same value as a settings file writes it: a bool, a number, a list or a string."""
    if opt.kind in ("flag", "switch"):
        return not opt.default
    text = sample_text(opt)
    if opt.type is options.checks.boolean:
        return options.checks.boolean(text)
    if opt.octal:
        return int(text, 8)
    if opt.bounds is not None:
        return float(text) if opt.type is float else int(text)
    return [text] if opt.kind == "list" else text


def sample_words(opt):
    """The option on the command line."""
    if opt.kind == "switch" and opt.default:
        return ["--no-" + opt.flags[-1][2:]]
    if opt.kind in ("flag", "switch"):
        return [opt.flags[-1]]
    return [opt.flags[-1], sample_text(opt)]


def sample_env(opt):
    if opt.kind in ("flag", "switch"):
        return "true" if not opt.default else "false"
    return sample_text(opt)


def config_from(argv, environ=None):
    kwargs = cli.parse_args(["apps.basic:app", *argv], environ or {})
    return Config(kwargs.pop("app"), **kwargs)


def fields(cfg):
    return {name: value for name, value in vars(cfg).items() if name != "startup_warnings"}


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """parse_args reads ./pyproject.toml: run where there is none, or the test's."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("opt", CONFIG_OPTIONS, ids=lambda opt: opt.name)
def test_every_option_reaches_config_from_each_source(opt, in_tmp):
    companions = COMPANIONS.get(opt.name, [])
    baseline = config_from(companions)
    by_flag = config_from([*companions, *sample_words(opt)])
    assert getattr(by_flag, opt.name) != getattr(baseline, opt.name), opt.name

    by_env = config_from(companions, {opt.env[0]: sample_env(opt)})
    assert fields(by_env) == fields(by_flag)

    conf = in_tmp / "conf.py"
    conf.write_text(f"{opt.name} = {sample_value(opt)!r}\n")
    by_file = config_from(["-c", str(conf), *companions])
    assert fields(by_file) == fields(by_flag)

    (in_tmp / "pyproject.toml").write_text(
        f"[tool.pyserver]\n{opt.name.replace('_', '-')} = {json.dumps(sample_value(opt))}\n"
    )
    by_pyproject = config_from(companions)
    assert fields(by_pyproject) == fields(by_flag)


@pytest.mark.parametrize("opt", CONFIG_OPTIONS, ids=lambda opt: opt.name)
def test_every_option_is_a_config_keyword_argument(opt):
    companions = cli.parse_args(["apps.basic:app", *COMPANIONS.get(opt.name, [])], {})
    companions.pop("app")
    by_keyword = Config("apps.basic:app", **companions, **{opt.name: sample_value(opt)})
    assert fields(by_keyword) == fields(
        config_from([*COMPANIONS.get(opt.name, []), *sample_words(opt)])
    )


@pytest.mark.parametrize("setting", sorted(options.BY_GUNICORN))
def test_gunicorn_setting_names_in_a_config_file(setting, in_tmp):
    opt = options.BY_GUNICORN[setting]
    conf = in_tmp / "conf.py"
    if not opt.config:  # wsgi_app: the APP
        conf.write_text(f"{setting} = 'apps.basic:app'\n")
        assert cli.parse_args(["-c", str(conf)], {})["app"] == "apps.basic:app"
        return
    companions = COMPANIONS.get(opt.name, [])
    conf.write_text(f"{setting} = {sample_value(opt)!r}\n")
    by_file = config_from(["-c", str(conf), *companions])
    assert fields(by_file) == fields(config_from([*companions, *sample_words(opt)]))


def test_gunicorn_rules_in_a_config_file(in_tmp):
    conf = in_tmp / "conf.py"
    conf.write_text("limit_request_line = 0\naccesslog = None\nproxy_protocol = 1\n")
    cfg = config_from(["-c", str(conf)])
    assert cfg.limit_request_line == options.BY_NAME["limit_request_line"].bounds[1]
    assert cfg.access_log is False
    assert cfg.proxy_protocol is True


def test_config_file_values_of_the_settings_own_type(in_tmp):
    """gunicorn's list of trusted proxies, and a bool for an option that takes one."""
    conf = in_tmp / "conf.py"
    conf.write_text(
        "forwarded_allow_ips = ['10.0.0.1', '10.0.0.0/8']\nws_per_message_deflate = False\n"
    )
    cfg = config_from(["-c", str(conf)])
    assert cfg.forwarded_allow_ips == "10.0.0.1,10.0.0.0/8"
    assert cfg.ws_per_message_deflate is False


def test_unknown_name_in_a_config_file_is_an_error_naming_it(in_tmp, capsys):
    conf = in_tmp / "conf.py"
    conf.write_text("wokers = 4\n")
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_args(["apps.basic:app", "-c", str(conf)], {})
    assert exit_info.value.code == 2
    assert f"config file {conf}: wokers: unknown setting" in capsys.readouterr().err


def test_unknown_key_in_pyproject_is_an_error_naming_it(in_tmp, capsys):
    (in_tmp / "pyproject.toml").write_text("[tool.pyserver]\nwokers = 4\n")
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_args(["apps.basic:app"], {})
    assert exit_info.value.code == 2
    assert "pyproject.toml [tool.pyserver]: wokers: unknown option" in capsys.readouterr().err


def test_config_is_not_a_setting_of_the_files(in_tmp, capsys):
    """-c names the file: neither file may name another one."""
    conf = in_tmp / "conf.py"
    conf.write_text("config = 'other.py'\n")
    with pytest.raises(SystemExit):
        cli.parse_args(["apps.basic:app", "-c", str(conf)], {})
    assert "config: unknown setting" in capsys.readouterr().err


def test_gunicorn_only_settings_are_ignored_with_one_warning(in_tmp):
    conf = in_tmp / "conf.py"
    conf.write_text("worker_class = 'sync'\ndaemon = False\nworkers = 2\n")
    kwargs = cli.parse_args(["apps.basic:app", "-c", str(conf)], {})
    assert kwargs["workers"] == 2
    (warning,) = kwargs["startup_warnings"]
    assert "ignored: worker_class, daemon" in warning


def test_help_shows_every_option_with_its_help():
    parser, _ = cli.build_parser()
    # argparse wraps lines, also after the hyphens of a flag: compare without whitespace.
    text = "".join(parser.format_help().split())
    for opt in options.OPTIONS:
        if opt.hidden or not opt.flags:
            continue
        for flag in opt.flags:
            assert flag in text, flag
        assert "".join(opt.help_text().split()).replace("%%", "%") in text, opt.name


def test_configuration_doc_tables_are_the_generated_ones():
    text = (ROOT / "docs" / "configuration.md").read_text()
    assert options.render_docs(text) == text, (
        "docs/configuration.md is out of date: python -m pyserver.options --write "
        "docs/configuration.md"
    )
    for opt in options.OPTIONS:
        if opt.config and not opt.hidden:
            assert f"| `{opt.env[0]}`" in text, opt.name


def test_doc_generator_checks_and_rewrites_a_stale_doc(tmp_path):
    stale = tmp_path / "configuration.md"
    stale.write_text(
        "# Options\n\n<!-- options: Sockets -->\n| old |\n<!-- end of generated table -->\n"
    )
    result = run_cli("-m", "pyserver.options", "--check", str(stale), command=[cli.sys.executable])
    assert result.returncode == 1, result
    assert "out of date" in result.stdout
    result = run_cli("-m", "pyserver.options", "--write", str(stale), command=[cli.sys.executable])
    assert result.returncode == 0, result
    assert "| `--port PORT` | `PYSERVER_PORT` | `8000` |" in stale.read_text()
    assert "| old |" not in stale.read_text()
    result = run_cli("-m", "pyserver.options", "--check", str(stale), command=[cli.sys.executable])
    assert result.returncode == 0, result


def test_three_sources_at_once_through_the_real_command_line(tmp_path):
    """A flag, an environment variable and a -c file, each for its own option, all in
    effect in the server that starts."""
    conf = tmp_path / "conf.py"
    conf.write_text(textwrap.dedent("limit_request_line = 100\n"))
    env = {"PYSERVER_DATE_HEADER": "false"}
    with run_server("apps.basic:app", "--no-server-header", "-c", str(conf), env=env) as srv:
        response = fetch(srv.port, "GET", "/hello")
        assert response.status == 200
        assert "server" not in response.headers and "date" not in response.headers
        target = "/hello?" + "x" * 120
        raw = raw_request(srv.port, f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert raw.startswith(b"HTTP/1.1 414 "), raw[:80]


def test_bad_value_from_the_default_environment_variable_names_it():
    result = run_cli("apps.basic:app", env={"FORWARDED_ALLOW_IPS": "nope"})
    assert result.returncode == 2, result
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("pyserver: error: environment variable FORWARDED_ALLOW_IPS: ")
    )
