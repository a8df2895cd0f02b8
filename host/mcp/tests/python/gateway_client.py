"""The official Python MCP client (PyPI `mcp`) through agentrt's gateway: what an agent framework's
MCP client does. Prints one JSON object the Rust test reads.

  python gateway_client.py URL API_KEY AGENT SESSION
"""

import asyncio
import json
import sys

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def main(url: str, key: str, agent: str, session: str) -> None:
    headers = {"Authorization": f"Bearer {key}", "x-agent-id": agent, "x-session-id": session}
    http = create_mcp_http_client(headers=headers)
    out = {}
    async with Client(streamable_http_client(url, http_client=http)) as client:
        tools = await client.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)
        out["read_only"] = sorted(t.name for t in tools.tools if t.annotations and t.annotations.read_only_hint)
        calls = []
        for _ in range(2):
            result = await client.call_tool("lookup", {"topic": "kyoto"})
            calls.append({"text": result.content[0].text, "meta": result.meta or {}})
        out["calls"] = calls
        failed = await client.call_tool("fail", {"message": "from python"})
        out["fail_is_error"] = failed.is_error
        try:
            await client.call_tool("teleport", {})
            out["unknown_tool_error"] = None
        except Exception as error:  # the gateway's JSON-RPC error
            out["unknown_tool_error"] = str(error)
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
