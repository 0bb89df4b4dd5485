"""StartupError: why the server cannot start, and the exit status that says so."""


class StartupError(Exception):
    """The server cannot start.

    str(self) is the one line to print after "pyserver: "; exit_code is the
    process status: 3 when the application cannot be loaded, 1 otherwise.
    """

    def __init__(self, message, exit_code=1):
        super().__init__(message)
        self.exit_code = exit_code
