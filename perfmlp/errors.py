"""The one exception type a user sees: its message is the one-line error."""


class PerfmlpError(Exception):
    """A problem with the user's input or environment, reported in one line.

    `exit_code` is what the process exits with: 2 for bad input
    (configuration, data files, traces), 1 for a run that failed.
    """

    exit_code = 2


class RunFailure(PerfmlpError):
    """The run itself failed (non-finite loss, a rank died)."""

    exit_code = 1
