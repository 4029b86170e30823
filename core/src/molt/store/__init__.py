"""The LanceDB store: events, late rewards, quarantine, memories, skills and policy versions."""

from molt.store.filters import Filter
from molt.store.lance import FOLLOWER_CACHES, FOLLOWER_INDEX_CACHE_BYTES, FOLLOWER_METADATA_CACHE_BYTES, Store
from molt.store.query import Trajectory, TrajectorySummary

__all__ = [
    "FOLLOWER_CACHES",
    "FOLLOWER_INDEX_CACHE_BYTES",
    "FOLLOWER_METADATA_CACHE_BYTES",
    "Filter",
    "Store",
    "Trajectory",
    "TrajectorySummary",
]
