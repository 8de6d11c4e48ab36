"""The idlelib package implements the Idle application.

Idle includes an interactive shell and editor.
Starting with Python 3.6, IDLE requires tcl/tk 8.5 or later.
Use the files named idle.* to start Idle.

The other files are private implementations.  Their details are subject to
change.  See PEP 434 for more.  Import them at your own risk.
"""
testing = False  # Set True by test.test_idle.
