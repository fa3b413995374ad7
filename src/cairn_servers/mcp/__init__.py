"""MCP protocol core: JSON-RPC 2.0, lifecycle, tools/resources/prompts, stdio and Streamable HTTP."""

# The protocol revisions this core speaks. Here rather than in a module of their own: server, session,
# methods and the HTTP transport all read them, and the package is imported anyway (one module fewer
# before a stdio server's first reply).
LATEST_PROTOCOL_VERSION = "2025-11-25"
SUPPORTED_PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
