"""The desk's scripted model, a little slow: a control-plane cycle replaying with it lasts seconds, so two
`molt evolve run` processes started together overlap (``--backend slow_desk:SlowDesk``)."""

from __future__ import annotations

import time
from typing import Any

from molt_desk.world import DeskModel


class SlowDesk(DeskModel):
    def _answer(self, req: Any) -> Any:
        time.sleep(0.3)
        return super()._answer(req)
