"""One module per group of CLI commands; each ``cmd_*(args, argv) -> exit code``."""
