"""molt-mcp tests: a real MCP server and client in process, and through the recording proxy."""
