"""One module per group of CLI commands; each ``cmd_*(args, argv) -> exit code``.

:data:`COMMANDS` names every command, the module that registers it and its one-line help, so the top-level
``depthaudit --help`` lists them without importing torch; a command's own parser is built only when used.
"""

COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("run", "train one model under one credit method"),
    "audit": ("audit", "the audit protocol: standard pair vs D1/D2/D3 and per-layer cosine"),
    "intervene": ("audit", "scale-penalty intervention: the audit over a λ grid"),
    "probes": ("audit", "our probes: credit-mix α sweep and BP warm start for one method"),
    "identity": ("audit", "frozen-init identity check over seeds"),
    "ladder": ("ladder", "depth-utility ladder: train the last k blocks, k = 0..L"),
    "report": ("ladder", "rebuild tables and figures from saved JSON (no training)"),
    "saturation": ("depth", "depth sweep: AG, AGmax and growth value V vs depth"),
    "grow": ("depth", "function-preserving growth vs the same architecture from scratch"),
}
