"""gunicorn config file for the proxy tests: a custom secure_scheme_headers table."""

secure_scheme_headers = {"X-SCHEME": "secure", "X-Forwarded-Ssl": "on"}
