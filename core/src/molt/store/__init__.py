"""The LanceDB store: events, late rewards, quarantine, memories, skills and policy versions."""

from molt.store.lance import Store
from molt.store.query import Trajectory, TrajectorySummary, sql_str

__all__ = [
    "Store",
    "Trajectory",
    "TrajectorySummary",
    "sql_str",
]
