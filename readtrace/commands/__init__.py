"""The list of subcommands: name -> module. Each module's docstring is its help; it defines
``add_arguments(parser)`` and ``run(args) -> int`` and calls one library function."""

COMMANDS: dict[str, str] = {
    "report": "readtrace.commands.report",
}
