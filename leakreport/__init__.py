"""The ``leakreport`` command: a thin click layer above ``analyzer`` and ``reports``.

One module per command group (``cmd_*.py``); what they share (analysis options,
output, progress, exit codes) lives in ``common``. Heavy modules are imported
inside the commands that use them.
"""
