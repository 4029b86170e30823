"""The web console served by ``molt serve`` at ``/console``: trajectories, policy versions, the
decision log, live signals and quarantine, tenant-scoped by the API key that opens it."""

from molt.console.app import create_console_app
from molt.console.auth import ConsoleAuth

__all__ = ["ConsoleAuth", "create_console_app"]
