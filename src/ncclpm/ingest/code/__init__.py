"""The code reader: Python, notebooks, shell scripts, configs - read for settings only, never as evidence - into
the `code_settings` table (`settings.py`, over the logical statements of `statements.py`)."""
