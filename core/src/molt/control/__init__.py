"""The evolution control plane: composite agent versions, memory and skills, signals, diagnosis,
intervention selection, gates, rollback and the decision log.

Import the submodules directly (``molt.control.versions``, ``molt.control.plane``, …): this package
keeps ``import molt`` light and loads nothing itself.
"""
