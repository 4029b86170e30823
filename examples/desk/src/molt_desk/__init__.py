"""The scripted support-desk world and the control plane's labelled scenario suite (an example)."""

__all__: list[str] = []
