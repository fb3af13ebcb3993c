"""The benchmarks: scripts run with ``make bench-*`` (each on its own sandbox, ports +20000), and
the recovery benchmark that chapter 10 imports (on the chapter's sandbox)."""
