"""MCP protocol core: JSON-RPC 2.0, lifecycle, tools/resources/prompts, stdio and Streamable HTTP."""
