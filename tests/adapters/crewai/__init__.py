"""molt-crewai tests: run with ``.venv-crewai/bin/python -m pytest tests/adapters/crewai`` (CrewAI's pins
differ from the main environment's); in the main environment they skip."""
