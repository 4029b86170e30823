"""The acknowledgement window of ``molt serve``, with and without ``--ack-after-durable``.

Each trial starts ``molt serve --backend stub`` (default governance) on a fresh ``MOLT_HOME``, loads it
with 4 clients of non-streamed chat calls, ``kill -9``s the whole process group (gateway and capture
child) 0.3 – 1.5 s after its capture child first spooled, restarts a Recorder on the spool and counts the answered
calls missing from the store (``tests/reliability/relharness.ack_trial``).

    python bench/reliability/ack_window.py --trials 20            # both modes, 20 trials each
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "reliability"))

from relharness import ack_trial  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--modes", default="durable,default", help="comma-separated: durable, default")
    ap.add_argument("--first-seed", type=int, default=0, help="trial seeds start here (to add trials to a run)")
    args = ap.parse_args()
    for mode in args.modes.split(","):
        durable = mode == "durable"
        lost, acked, bad = [], [], 0
        with tempfile.TemporaryDirectory() as tmp:
            for seed in range(args.first_seed, args.first_seed + args.trials):
                res = ack_trial(Path(tmp) / f"t{seed}", 1000 + seed, durable=durable)
                lost.append(res.lost)
                acked.append(res.acked_events)
                bad += 0 if (res.ok or (not durable and not (res.duplicated or res.chains_bad))) else 1
                print(f"{mode} trial {seed}: answered {res.acked_events}, lost {res.lost}, duplicated "
                      f"{res.duplicated}, bad chains {res.chains_bad}", flush=True)
        print(f"{'--ack-after-durable' if durable else 'default (answer, then record)'}: {args.trials} kill -9 "
              f"trials, {sum(acked):,} answered calls, {sum(lost)} lost (per trial: median "
              f"{statistics.median(lost):g}, max {max(lost)}; {sum(1 for x in lost if x)} of {args.trials} trials "
              f"lost some); trials with duplicates or broken chains: {bad}", flush=True)


if __name__ == "__main__":
    main()
