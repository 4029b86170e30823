"""molt-langchain tests: LangChain and LangGraph run for real with a scripted tool-calling chat model."""
