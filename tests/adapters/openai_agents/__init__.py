"""molt-openai-agents tests: the real Agents SDK against a scripted OpenAI-compatible server on loopback."""
