"""``python -m molt_trainer.ray.export``: eligible recorded trajectories → a verl parquet dataset.

::

    python -m molt_trainer.ray.export --out data/molt.parquet --governance governance.yaml --tenant acme
    python -m molt_trainer.ray.export --out data/molt.parquet --train-on-ungoverned-data   # development store
"""

from __future__ import annotations

import argparse

from molt_trainer.data import build_samples
from molt_trainer.ray.dataset import rows_from_samples, write_parquet


def main(argv: list[str] | None = None) -> None:
    """Entry point."""
    p = argparse.ArgumentParser(prog="python -m molt_trainer.ray.export")
    p.add_argument("--out", required=True)
    p.add_argument("--store", default=None)
    p.add_argument("--governance", default="default", help="policy file ('default': the built-in policy)")
    p.add_argument("--tenant", default=None, help="default: 'default' (ungoverned: every tenant)")
    p.add_argument("--train-on-ungoverned-data", action="store_true",
                   help="export the store as recorded, unredacted and without eligibility checks")
    p.add_argument("--gamma", type=float, default=1.0)
    args = p.parse_args(argv)
    from molt.store import Store

    store = Store.open(args.store)
    if args.train_on_ungoverned_data:
        from molt_trainer.service import StoreSource

        trajectories = StoreSource(store, tenant=args.tenant).read(None)
    else:
        from molt.governance import Principal, Role, load_policy_file
        from molt.governance.training import eligible_trajectories

        trajectories = eligible_trajectories(store, load_policy_file(args.governance),
                                             Principal(args.tenant or "default", Role.TRAINER))
    samples, stats = build_samples(trajectories, gamma=args.gamma)
    path = write_parquet(rows_from_samples(samples, trajectories), args.out)
    print(f"{len(samples)} rows from {stats.trajectories} trajectories -> {path}; skipped {dict(stats.skipped)}")
    store.close()


if __name__ == "__main__":
    main()
