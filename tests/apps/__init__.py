"""WSGI applications served by the test-suite (imported by the server with cwd=tests/)."""
