"""``python -m molt_trainer.ray.export``: eligible recorded trajectories → a verl parquet dataset.

::

    python -m molt_trainer.ray.export --out data/molt.parquet --governance governance.yaml --tenant acme
    python -m molt_trainer.ray.export --out data/molt.parquet --ungoverned     # development store
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
    p.add_argument("--governance", default=None)
    p.add_argument("--tenant", default=None)
    p.add_argument("--ungoverned", action="store_true")
    p.add_argument("--gamma", type=float, default=1.0)
    args = p.parse_args(argv)
    from molt.store import Store

    store = Store.open(args.store)
    if args.ungoverned:
        from molt_trainer.service import StoreSource

        trajectories = StoreSource(store, tenant=args.tenant).read(None)
    else:
        if not (args.governance and args.tenant):
            raise SystemExit("give --governance POLICY --tenant TENANT, or --ungoverned")
        from molt.governance import Principal, Role, load_policy_file
        from molt.governance.training import eligible_trajectories

        trajectories = eligible_trajectories(store, load_policy_file(args.governance),
                                             Principal(args.tenant, Role.TRAINER))
    samples, stats = build_samples(trajectories, gamma=args.gamma)
    path = write_parquet(rows_from_samples(samples, trajectories), args.out)
    print(f"{len(samples)} rows from {stats.trajectories} trajectories -> {path}; skipped {dict(stats.skipped)}")
    store.close()


if __name__ == "__main__":
    main()
