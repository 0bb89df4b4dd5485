"""What a valid value of each kind of option is.

Each function takes a value as the command line, the environment or a settings file
gives it (text), or as a program passes it to Config (an int, a path, a pair), and
returns the value Config keeps. A bad value raises ValueError with the one line the user
sees after "argument --OPTION: " or "environment variable NAME: ". The option table
(options.py) says which check each option uses and with which bounds.
"""

import os

from pyserver import importer

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def range_text(lo, hi):
    def text(x):
        return str(x) if isinstance(x, int) else f"{x:g}"  # 16777216, not 1.67772e+07

    if hi is None:
        return f"at least {text(lo)}"
    return f"between {text(lo)} and {text(hi)}"


def integer(value, lo, hi):
    """value as an int from lo to hi (None: unbounded), both included."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected an integer, got {value!r}") from None
    if number < lo or (hi is not None and number > hi):
        raise ValueError(f"must be {range_text(lo, hi)}, got {number}")
    return number


def seconds(value, lo, hi):
    """value as a float number of seconds from lo to hi (None: unbounded)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected a number of seconds, got {value!r}") from None
    if not number >= lo or (hi is not None and number > hi):
        raise ValueError(f"must be {range_text(lo, hi)}, got {value}")
    return number


def choice(value, choices):
    """One of choices, compared in lower case (--log-level DEBUG, http=2)."""
    word = str(value).lower()
    if word not in choices:
        raise ValueError(f"invalid choice {word!r} (choose from {', '.join(choices)})")
    return word


def boolean(value):
    """true/false words (1/0, yes/no, on/off) as text; any other Python value by its truth."""
    if not isinstance(value, str):
        return bool(value)
    word = value.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def octal(limit, example):
    """A check of an octal number from 0 to limit (file modes, umasks): text is read in
    octal, an int is taken as it is (0o022 in a config file)."""

    def check(value):
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = int(value, 8)
            except (TypeError, ValueError):
                number = -1
        if not 0 <= number <= limit:
            raise ValueError(f"expected {example}, got {value!r}")
        return number

    return check


file_mode = octal(0o7777, "octal permissions such as 660")
umask = octal(0o777, "an octal umask such as 022")


def env_pair(value):
    """KEY=VALUE as (KEY, VALUE); a program may give the pair itself."""
    if not isinstance(value, str):
        key, val = value
        return (key, val)
    key, sep, val = value.partition("=")
    if not sep or not key or "\0" in value:
        raise ValueError(f"expected KEY=VALUE, got {value!r}")
    return (key, val)


def app_spec(value):
    """MODULE:ATTR (MODULE alone: MODULE:application); an application object as it is."""
    if not isinstance(value, str):
        if callable(value):
            return value
        raise ValueError(f"expected MODULE:ATTR, got {value!r}")
    module, attr = importer.split_app_spec(value)
    return f"{module}:{attr}"


def root_path(value):
    """A mount path: "" or starting with '/', kept without its trailing '/'."""
    if value and not value.startswith("/"):
        raise ValueError(f"must start with '/', got {value!r}")
    return value.rstrip("/")


def path(value):
    return os.fspath(value)


# --ssl-cert-reqs: uvicorn's and gunicorn's numbers (ssl.CERT_*) or their names.
CERT_REQS = {"none": 0, "optional": 1, "required": 2, "0": 0, "1": 1, "2": 2}
TLS_VERSIONS = {"tlsv1.2": "TLSv1.2", "1.2": "TLSv1.2", "tlsv1.3": "TLSv1.3", "1.3": "TLSv1.3"}


def cert_reqs(value):
    """--ssl-cert-reqs as 0, 1 or 2 (none, optional, required)."""
    key = str(int(value) if isinstance(value, int) else value).strip().lower()
    if key.startswith("cert_"):  # ssl.CERT_REQUIRED's name
        key = key[len("cert_") :]
    if key not in CERT_REQS:
        raise ValueError(f"expected none, optional or required (or 0, 1, 2), got {value!r}")
    return CERT_REQS[key]


def tls_version(value):
    """--ssl-version as "TLSv1.2" or "TLSv1.3" (the minimum accepted).

    uvicorn's default (ssl.PROTOCOL_TLS_SERVER, 17) and ssl.PROTOCOL_TLS (2) mean TLS 1.2;
    ssl.TLSVersion values (771, 772) their version.
    """
    if isinstance(value, int):
        by_number = {2: "TLSv1.2", 17: "TLSv1.2", 771: "TLSv1.2", 772: "TLSv1.3"}
        if value in by_number:
            return by_number[value]
    elif str(value).strip().lower() in TLS_VERSIONS:
        return TLS_VERSIONS[str(value).strip().lower()]
    raise ValueError(f"the minimum TLS version must be TLSv1.2 or TLSv1.3, got {value!r}")


HSTS_DIRECTIVES = {"includesubdomains": "includeSubDomains", "preload": "preload"}


def hsts(value):
    """--hsts SECONDS[,includeSubDomains][,preload]: the Strict-Transport-Security value
    ("max-age=31536000; includeSubDomains"), or None for None."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise ValueError(f"expected SECONDS[,includeSubDomains][,preload], got {value!r}")
    # Config's own value reads back the same ("max-age=60; preload").
    value = value.replace("max-age=", "", 1).replace(";", ",")
    words = [word.strip() for word in value.split(",")]
    seconds = integer(words[0], 0, 2**31 - 1)
    parts = [f"max-age={seconds}"]
    for word in words[1:]:
        directive = HSTS_DIRECTIVES.get(word.lower())
        if directive is None:
            raise ValueError(f"unknown HSTS directive {word!r}: includeSubDomains or preload")
        if directive not in parts:
            parts.append(directive)
    return "; ".join(parts)


def static_mount(value):
    """One --static mount, "PREFIX=DIR" or a (PREFIX, DIR) pair.

    Returns "PREFIX=DIR" with PREFIX without its trailing '/'. PREFIX is an absolute URL
    path without '%', '\\', NUL, '.' or '..' segments.
    """
    if isinstance(value, str):
        prefix, sep, directory = value.partition("=")
    else:
        (prefix, directory), sep = value, "="
    directory = os.fspath(directory)
    if not sep or not prefix.startswith("/") or not directory:
        raise ValueError(f"expected PREFIX=DIR with PREFIX starting with '/', got {value!r}")
    if any(ch in prefix for ch in "%\\\0") or any(
        part in (".", "..") for part in prefix.split("/")
    ):
        raise ValueError(f"PREFIX may not hold '%', '\\', NUL, '.' or '..': {prefix!r}")
    if "\0" in directory:
        raise ValueError(f"DIR may not hold NUL: {directory!r}")
    return f"{prefix.rstrip('/') or '/'}={directory}"


def health_path(value):
    """--health-check-path: an absolute URL path of visible ASCII characters, without a
    query or fragment; requests match it byte for byte (their query left out)."""
    text = str(value)
    if not text.startswith("/") or any(ch in "?#" or not "!" <= ch <= "~" for ch in text):
        raise ValueError(
            f"expected a URL path starting with '/', in visible ASCII without '?' or '#', "
            f"got {value!r}"
        )
    return text


def media_type_pattern(value):
    """One --compress-types entry: "type/subtype", "type/*" or "*+suffix", in lower case."""
    text = str(value).strip().lower()
    token = "abcdefghijklmnopqrstuvwxyz0123456789!#$&-^_.+"
    if text.startswith("*+"):
        ok = len(text) > 2 and all(ch in token for ch in text[2:])
    else:
        kind, sep, sub = text.partition("/")
        ok = bool(sep and kind and sub) and all(ch in token for ch in kind)
        ok = ok and (sub == "*" or all(ch in token for ch in sub))
    if not ok or len(text) > 63:
        raise ValueError(f"expected type/subtype, type/* or *+suffix, got {value!r}")
    return text


def forwarded_allow_ips(value):
    """A trust list as the core reads it: "ADDR,NET/PREFIX,..." or "*".

    value is that string or a sequence of items (gunicorn's form). Names the first item
    that is not an IP address, a CIDR network or "*".
    """
    if not isinstance(value, str):
        value = ",".join(str(item) for item in value)
    try:
        from pyserver import _core
    except ImportError:  # the extension is not built: reported when the server starts
        return value
    _core.check_forwarded_allow_ips(value)
    return value


def access_log_format(fmt):
    """An access line format, checked by the core's compiler (naming an unknown atom)."""
    if not isinstance(fmt, str):
        raise ValueError(f"access_log_format must be str, got {fmt!r}")
    try:
        from pyserver import _core
    except ImportError:  # the extension is not built: reported when serving starts
        return fmt
    _core.check_access_log_format(fmt)
    return fmt
