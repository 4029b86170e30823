"""The governance pipeline's stages by name: what a policy file's ``pipeline`` may list and what a
:class:`~molt.governance.pipeline.GovernancePipeline` builds its stages from.

A module of its own so the policy checks the names it is given without importing the stages, which
read the policy. The built-in stages (:data:`~molt.governance.policy.DEFAULT_STAGES`) register
themselves when :mod:`molt.governance.stages` is imported; a custom stage registers here (or through
``molt.governance.stages.stages``, the same object).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from molt.registry import Registry

if TYPE_CHECKING:
    from molt.governance.pipeline import GovernancePipeline
    from molt.governance.stages import Stage

__all__ = ["stages"]

#: Stage factories by name; a factory takes the :class:`GovernancePipeline` it belongs to.
stages: Registry[Callable[[GovernancePipeline], Stage]] = Registry("governance stage")
