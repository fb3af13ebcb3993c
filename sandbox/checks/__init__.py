"""Whether the sandbox works: :mod:`~sandbox.checks.health` asks each service whether it
answers (and waits for it, or says which one does not), :mod:`~sandbox.checks.smoke` proves
the services end to end with a round trip each (``python -m sandbox smoke``).
"""
