"""The one exception type the CLI turns into a one-line message and exit code 2."""


class DsgenError(Exception):
    """Bad input from the user: the message says what is wrong and how to fix it, on one line."""
