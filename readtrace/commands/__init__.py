"""The list of subcommands: name -> module. Each module's docstring is its help; it defines
``add_arguments(parser)`` and ``run(args) -> int`` and calls one library function."""

COMMANDS: dict[str, str] = {
    "record": "readtrace.commands.record",
    "doctor": "readtrace.commands.doctor",
    "simfs": "readtrace.commands.simfs",
    "report": "readtrace.commands.report",
    "fix": "readtrace.commands.fix",
    "demo": "readtrace.commands.demo",
    "import": "readtrace.commands.importlog",
    "probe": "readtrace.commands.probe",
}
