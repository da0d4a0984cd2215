"""The exceptions the CLI turns into one line: bad input (exit 2), an interrupt (exit 130)."""

import re


class UsageError(Exception):
    """Bad input from the user, or a fault of their machine: the message names the problem and the fix."""


class ConfigError(UsageError):
    """A refused configuration value, worded in the caller's own terms.

    The message is a template naming fields as ``{field}`` or ``{field=value}``: Python shows ``d_hidden`` and
    ``download=True`` (the keywords the caller used), the CLI ``--d-hidden`` and ``--download`` (its flags; see
    :meth:`for_cli`). ``flags`` maps a field to its flag where that is not the field's name dashed
    (``k_values`` → ``--k_values``). ``str(exc)`` is the Python wording; ``exc.field`` the first field named.
    """

    FIELD = re.compile(r"\{([a-z_][a-z0-9_]*)(?:=([^{}]*))?\}")

    def __init__(self, template: str, flags: dict[str, str] | None = None):
        self.template, self.flags = template, dict(flags or {})
        m = self.FIELD.search(template)
        self.field = m.group(1) if m else None
        super().__init__(self.render(cli=False))

    def render(self, cli: bool) -> str:
        """The message with each field as a keyword (``cli=False``) or as its flag (``cli=True``)."""

        def name(m: re.Match) -> str:
            field, value = m.group(1), m.group(2)
            if not cli:
                return field if value is None else f"{field}={value}"
            flag = self.flags.get(field) or "--" + field.replace("_", "-")
            return flag if value in (None, "True") else f"{flag} {value}"

        return self.FIELD.sub(name, self.template)

    def renamed(self, field: str, to: str) -> "ConfigError":
        """This refusal with ``{field}`` written as ``to`` (a template: a caller's own field), if it names ``field``."""
        if self.field != field:
            return self
        return ConfigError(self.template.replace("{" + field + "}", to), self.flags)

    def for_cli(self) -> str:
        """The message as the command line reads it (fields as flags)."""
        return self.render(cli=True)

    def __reduce__(self):  # (a worker's refusal crosses processes intact)
        return (type(self), (self.template, self.flags))


def cli_message(exc: UsageError) -> str:
    """What the CLI prints for a refusal: a :class:`ConfigError` in flags, any other as written."""
    return exc.for_cli() if isinstance(exc, ConfigError) else str(exc)


class Interrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM stopped the work: every worker is gone, finished runs are stored; the message says so."""
