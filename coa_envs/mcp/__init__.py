"""MCP both ways: :mod:`coa_envs.mcp.server` serves our tools to any MCP client
(``coa mcp serve``); :mod:`coa_envs.mcp.client` lets an env use the tools of an external MCP
server (``mcp_servers:`` in its config). The ``mcp`` package is imported lazily."""
