"""The project's site: the recorded workbook chapters (none is run), the README and docs/,
rendered as static HTML by :mod:`book.site` (``make book``, ``python -m book --out build/book``).
A package of its own: it imports nothing of the sandbox, the producers or the job.
"""
