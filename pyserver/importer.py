"""Find the application: import "module:attr", tell WSGI from ASGI, wrap ASGI 2 into ASGI 3."""

import asyncio
import functools
import importlib
import inspect
import sys
import traceback


class AppImportError(Exception):
    """The application could not be loaded; str(self) is a one-line reason.

    in_app is True when the failure happened inside the application's own
    code (its traceback is then worth showing), False when the module or
    attribute simply does not exist.
    """

    def __init__(self, message, in_app=False):
        super().__init__(message)
        self.in_app = in_app


def app_traceback(exc):
    """The traceback of an exception raised by the application's code, as text starting with
    a newline, without the frames of pyserver's importer and importlib."""
    if exc is None:
        return ""
    tb = traceback.TracebackException.from_exception(exc)
    ours = (
        __file__,
        importlib.__file__,
        "<frozen importlib._bootstrap>",
        "<frozen importlib._bootstrap_external>",
    )
    tb.stack = traceback.StackSummary.from_list(
        [frame for frame in tb.stack if frame.filename not in ours]
    )
    text = "".join(tb.format())
    if not tb.stack:  # a SyntaxError: where it is comes after the header
        text = "Traceback (most recent call last):\n" + text
    return "\n" + text.rstrip("\n")


def split_app_spec(spec):
    """Split "module:attr" into ("module", "attr"); raise ValueError if malformed.

    "module" alone means "module:application", as in gunicorn (`pyserver mysite.wsgi`).
    """
    module, sep, attr = spec.partition(":")
    if not sep:
        attr = "application"
    if not module or not attr:
        raise ValueError(f'expected MODULE:ATTR, got "{spec}"')
    if not all(part.isidentifier() for part in module.split(".")):
        raise ValueError(f'"{module}" is not a module name')
    if not all(part.isidentifier() for part in attr.split(".")):
        raise ValueError(f'"{attr}" is not an attribute name')
    return module, attr


def _in_app_error(what, exc):
    return AppImportError(f"{what}: {type(exc).__name__}: {exc}", in_app=True)


def import_module(name):
    """Import a module, telling "it does not exist" from "it failed inside"."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        # Only the module itself (or a package above it) being absent counts
        # as "could not import": a missing library imported *by* the module
        # is the module's own error and must show as such.
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise AppImportError(f'could not import module "{name}" ({exc})') from exc
        raise _in_app_error(f'error while importing module "{name}"', exc) from exc
    except Exception as exc:
        raise _in_app_error(f'error while importing module "{name}"', exc) from exc


def import_from_string(spec, app_dir=None):
    """Return the object named by "module:attr" (attr may be dotted).

    app_dir, when given, is put first on sys.path so the module is found
    the way `python -m` would find it from that directory.
    Raises AppImportError with a one-line reason.
    """
    try:
        module_name, attr = split_app_spec(spec)
    except ValueError as exc:
        raise AppImportError(str(exc)) from None
    if app_dir is not None:
        sys.path.insert(0, app_dir)
    obj = import_module(module_name)
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AppImportError(
                f'attribute "{attr}" not found in module "{module_name}"'
            ) from None
    return obj


def load_app(app, app_dir=None, factory=False, name=None):
    """Return the application: app itself, or the object its "module:attr" names.

    With factory=True the object found is called with no arguments and its
    result is the application. name is how messages refer to the app.
    Raises AppImportError.
    """
    name = name or str(app)
    obj = import_from_string(app, app_dir) if isinstance(app, str) else app
    if factory:
        if not callable(obj):
            raise AppImportError(f'app factory "{name}" is not callable')
        try:
            obj = obj()
        except Exception as exc:
            raise _in_app_error(f'error while calling app factory "{name}"', exc) from exc
    if not callable(obj):
        raise AppImportError(f'"{name}" is not callable (got {type(obj).__name__})')
    return obj


def _unwrap(fn):
    """Look through functools.partial and functools.wraps layers."""
    while True:
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif inspect.isfunction(fn) and hasattr(fn, "__wrapped__"):
            fn = fn.__wrapped__
        else:
            return fn


def _is_coroutine_function(fn):
    """inspect.iscoroutinefunction, plus asgiref's marker on Python < 3.12.

    Before 3.12, asgiref.sync.markcoroutinefunction (used by Django for
    async-capable callables) sets a flag that only asyncio's variant sees.
    """
    if inspect.iscoroutinefunction(fn):
        return True
    return sys.version_info < (3, 12) and asyncio.iscoroutinefunction(fn)


def _call_is_async(cls):
    """True if instances of cls have an async __call__."""
    call = inspect.getattr_static(cls, "__call__", None)
    return _is_coroutine_function(_unwrap(call))


def _takes_one_positional(fn):
    """True if fn can be called with exactly one positional argument but not two.

    A WSGI callable is always called with (environ, start_response); an ASGI2
    callable (or class) is called with (scope) alone.
    """
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    try:
        sig.bind(object())
    except TypeError:
        return False
    try:
        sig.bind(object(), object())
    except TypeError:
        return True
    return False


def _takes_three_positional(fn):
    """True if fn must be called with three positional arguments: ASGI's (scope, receive,
    send), from a plain function that returns the coroutine of another. WSGI passes two."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    try:
        sig.bind(object(), object(), object())
    except TypeError:
        return False
    try:
        sig.bind(object(), object())
    except TypeError:
        return True
    return False


def detect_interface(app):
    """Return "asgi" or "wsgi" for an application object.

    ASGI: a coroutine function, an object whose __call__ is a coroutine
    function (Django's ASGIHandler, Starlette and FastAPI instances), an
    awaitable class, an ASGI2 callable taking (scope) alone, or a plain callable that
    needs three positional arguments (it returns the coroutine). Anything else (Flask,
    Bottle, Django's WSGIHandler, plain functions of two) is WSGI.
    """
    target = _unwrap(app)
    if inspect.isclass(target):
        if hasattr(target, "__await__") or _call_is_async(target):
            return "asgi"
    elif _is_coroutine_function(target):
        return "asgi"
    elif not inspect.isroutine(target) and _call_is_async(type(target)):
        return "asgi"
    if _takes_one_positional(target) or _takes_three_positional(target):
        return "asgi"
    return "wsgi"


def is_asgi2(app):
    """True if an ASGI application (detect_interface(app) == "asgi") is ASGI 2.

    ASGI 2 ("double callable"): app(scope) returns an object (usually an
    instance of app) that is then awaited as instance(receive, send). That is
    a class without __await__ (instantiating it runs __init__(scope)), or a
    plain callable taking the scope alone. ASGI 3 is a coroutine function or
    an object with an async __call__(scope, receive, send); an awaitable class
    (one with __await__) is ASGI 3 too, since cls(scope, receive, send) is
    awaited directly. asgiref's explicit markers `_asgi_single` and
    `_asgi_double` win over the inspection.
    """
    target = _unwrap(app)
    if getattr(target, "_asgi_double", False):
        return True
    if getattr(target, "_asgi_single", False):
        return False
    if inspect.isclass(target):
        return not hasattr(target, "__await__")
    if _is_coroutine_function(target):
        return False
    if not inspect.isroutine(target) and _call_is_async(type(target)):
        return False
    return _takes_one_positional(target)


def asgi2_to_asgi3(app):
    """Wrap an ASGI 2 application into an ASGI 3 coroutine function."""

    async def asgi3(scope, receive, send):
        instance = app(scope)
        await instance(receive, send)

    asgi3.asgi2_app = app  # the wrapped application, for introspection and messages
    return asgi3


def as_asgi3(app):
    """Return an ASGI application in ASGI 3 form: app itself, or app wrapped if ASGI 2."""
    return asgi2_to_asgi3(app) if is_asgi2(app) else app
