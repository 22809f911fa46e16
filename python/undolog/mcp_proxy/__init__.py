"""The MCP proxy face: any MCP client gets UndoLog in front of any MCP server.

Needs the ``mcp`` extra (``pip install 'undolog[mcp]'``). The binding never imports this
package; ``undolog mcp-proxy`` and ``undolog worker --mcp-config`` import it lazily.
"""

from undolog.mcp_proxy.policy import Policy, PolicyError, load_policy
from undolog.mcp_proxy.proxy import SESSION_META_KEY, UNDO_META_KEY, McpProxy
from undolog.mcp_proxy.server import serve
from undolog.mcp_proxy.worker import ProxyWorkerApp, load_worker_app

__all__ = [
    "SESSION_META_KEY",
    "UNDO_META_KEY",
    "McpProxy",
    "Policy",
    "PolicyError",
    "ProxyWorkerApp",
    "load_policy",
    "load_worker_app",
    "serve",
]
