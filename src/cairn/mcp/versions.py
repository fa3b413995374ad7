"""The MCP protocol revisions this core speaks (a leaf module: server, session and methods all read it)."""

LATEST_PROTOCOL_VERSION = "2025-11-25"
SUPPORTED_PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
