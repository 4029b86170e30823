"""Governance between capture and the training queue: access control, redaction, eligibility,
retention and erasure.

The pipeline (validate → authenticate → redact → classify → eligibility → retention) runs on the
Recorder's writer thread before sealing; each event's decision is stored with it; trainers read
through :class:`TrainingQueue`, admins through :class:`Audit`, every tenant-scoped read goes through
:class:`molt.store.scoped.TenantView`.

The stage registry is ``molt.governance.stages.stages``. Names are imported on first use, so
``molt.governance.access`` (the gateway's key check) and ``molt.governance.redaction``
(``molt redact``) do not pay for LanceDB.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from molt.governance.access import KeyRing, Permission, Principal, Role, generate_key, hash_key

if TYPE_CHECKING:
    from molt.governance.audit import Audit, AuditEntry
    from molt.governance.decision import Decision, RedactionSummary
    from molt.governance.erasure import ErasureReport, erase_subject, erase_tenant
    from molt.governance.pipeline import GovernancePipeline, PipelineStats
    from molt.governance.policy import GovernancePolicy, TenantPolicy, load_policy_file
    from molt.governance.retention import RetentionReport, run_retention
    from molt.governance.sink import GovernedSink
    from molt.governance.stages import Context, Reject, Stage
    from molt.governance.training import TrainingQueue, TrajectoryVerdict, eligible_trajectories

__all__ = [
    "Audit",
    "AuditEntry",
    "Context",
    "Decision",
    "ErasureReport",
    "GovernancePipeline",
    "GovernancePolicy",
    "GovernedSink",
    "KeyRing",
    "Permission",
    "PipelineStats",
    "Principal",
    "RedactionSummary",
    "Reject",
    "RetentionReport",
    "Role",
    "Stage",
    "TenantPolicy",
    "TrainingQueue",
    "TrajectoryVerdict",
    "eligible_trajectories",
    "erase_subject",
    "erase_tenant",
    "generate_key",
    "hash_key",
    "load_policy_file",
    "run_retention",
]

_LAZY = {
    "audit": ("Audit", "AuditEntry"),
    "decision": ("Decision", "RedactionSummary"),
    "erasure": ("ErasureReport", "erase_subject", "erase_tenant"),
    "pipeline": ("GovernancePipeline", "PipelineStats"),
    "policy": ("GovernancePolicy", "TenantPolicy", "load_policy_file"),
    "retention": ("RetentionReport", "run_retention"),
    "sink": ("GovernedSink",),
    "stages": ("Context", "Reject", "Stage"),
    "training": ("TrainingQueue", "TrajectoryVerdict", "eligible_trajectories"),
}
_WHERE = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'molt.governance' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"molt.governance.{module}"), name)
    globals()[name] = value
    return value
