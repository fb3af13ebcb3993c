"""Fault sets written out by hand from each fault's definition (docs and producers/faults.py's
docstrings), so the tests compare the registry with an oracle that does not come from it."""

#: The faults that damage a session's table (a record the contract rejects, a gap, a duplicate or
#: a divergence): a strict query stops on them, and their loss window runs to the next clean snapshot.
DAMAGING = frozenset(
    {"drop", "duplicate", "reorder", "corrupt", "schema-drift", "orphan-update", "silent-divergence", "oversized"}
)
