"""The verifier on a Kafka deletion: seconds to judge one session whose middle Kafka deleted, by size.

A deletion opens a loss window per deleted record (each to the session's next snapshot), and
the verifier looks a window up for every lost record. It scanned every window of the session per
lookup, so a deletion of N records cost N x N: chapter 07's 6,136 lost records of five sessions
took 60 s of judging. It now bisects windows indexed by where they open. The baseline is that
scan, put back in the same run (``_Findings._window`` and ``expected_output._uncertain`` as they
were), and both must give the same report.

No services: the session is built in memory and its outputs come from the job's own state
machine (``job.engine.session.step``), without the deleted records.

    .venv/bin/python bench/verify_deleted_bench.py                      # 1,000, 4,000, 16,000 deleted
    .venv/bin/python bench/verify_deleted_bench.py --sizes 2000 --skip-baseline
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from job.engine.session import Record, step  # noqa: E402
from job.verify import compare  # noqa: E402
from job.verify.compare import DeletedRange, check, output_frames  # noqa: E402
from producers import expected_output  # noqa: E402
from producers.contract import encode  # noqa: E402
from producers.ledger import ledger_frame  # noqa: E402
from tests.streams import ledger_entry, message, r  # noqa: E402

TOPIC = "collection-fleet-2"
SNAPSHOT_EVERY = 30  # as chapter 07's producers
ROWS = 10


def session(n: int):
    """A session of ``n`` messages: a snapshot every :data:`SNAPSHOT_EVERY`, upserts between, an
    ``end``; its ledger (all delivered, offsets in order) and Kafka's deletion of the middle 80 %."""
    table = {f"r{i}": r(f"r{i}", 0) for i in range(ROWS)}
    msgs = []
    for seq in range(n - 1):
        if seq % SNAPSHOT_EVERY == 0:
            msgs.append(message("snapshot", seq, rows=list(table.values())))
        else:
            rid = f"r{seq % ROWS}"
            table[rid] = r(rid, seq)
            msgs.append(message("upsert", seq, row=table[rid]))
    msgs.append(message("end", n - 1))
    ledger = ledger_frame([ledger_entry(m, i, topic=TOPIC, sent=encode(m), offset=i) for i, m in enumerate(msgs)])
    deleted = DeletedRange(topic=TOPIC, partition=0, start=n // 10, end=n - n // 10)
    return ledger, deleted


def outputs(ledger, deleted: DeletedRange):
    """The job's outputs for the records Kafka still had."""
    ok = ledger.sort_values("offset")
    records = [
        Record(TOPIC, 0, int(x.offset), x.session, x.sent, 0)
        for x in ok.itertuples()
        if not deleted.contains(TOPIC, 0, int(x.offset))
    ]
    s = step(None, records, policy="resync")
    return output_frames(s.changes, s.quarantine, [s.status])


def _scan_window(self, kind, key):
    """The lookup before the index: every window of the session, per lost record."""
    if key is None:
        return None
    covering = sorted((w for w in self.exp.windows if w.covers(*key)), key=lambda w: -w.from_seq)
    allowing = [w for w in covering if kind in {a.value for a in w.allowed}]
    return (allowing or covering or [None])[0]


def _scan_uncertain(windows, order, touched, everyone):
    """The uncertain rows before: every key per unrestored window."""
    uncertain: set[str] = set()
    for w in windows:
        if w.restored:
            continue
        if w.from_seq == 0:
            return uncertain | everyone
        for key in order:
            if key >= (w.epoch, w.from_seq):
                uncertain |= touched[key]
    return uncertain


@contextlib.contextmanager
def baseline():
    window, uncertain = compare._Findings._window, expected_output._uncertain
    compare._Findings._window, expected_output._uncertain = _scan_window, _scan_uncertain
    try:
        yield
    finally:
        compare._Findings._window, expected_output._uncertain = window, uncertain


def judge(ledger, frames, deleted):
    started = time.perf_counter()
    report = check(ledger, *frames, policy="resync", deleted=[deleted])
    return time.perf_counter() - started, report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,4000,16000", help="messages in the session, comma-separated")
    parser.add_argument("--skip-baseline", action="store_true", help="leave out the scan it replaced")
    args = parser.parse_args()
    print(f"{'messages':>9} {'lost':>7} {'indexed s':>10} {'scan s':>9} {'scan / indexed':>15}  verdict")
    for n in (int(x) for x in args.sizes.split(",")):
        ledger, deleted = session(n)
        frames = outputs(ledger, deleted)
        fast, report = judge(ledger, frames, deleted)
        if not report.ok or report.lost != deleted.count:
            print(report.summary(), file=sys.stderr)
            return 1
        slow = ratio = "-"
        if not args.skip_baseline:
            with baseline():
                seconds, old = judge(ledger, frames, deleted)
            if old != report:
                print(f"the scan and the index disagree at {n} messages", file=sys.stderr)
                return 1
            slow, ratio = f"{seconds:.2f}", f"{seconds / fast:.1f}x"
        print(f"{n:>9,} {report.lost:>7,} {fast:>10.2f} {slow:>9} {ratio:>15}  OK, {report.lost} lost, all deleted by Kafka")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
