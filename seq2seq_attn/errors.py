"""The one exception type a user can cause.

Anything raised as `UserError` is printed by the CLI as a single line on stderr (no traceback unless
`--debug`), followed by a non-zero exit. Messages must name the file, line or config key at fault.
"""


class UserError(Exception):
    """A problem with the user's input (config, files, options), not a bug in seq2seq-attn."""
