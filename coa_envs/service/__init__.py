"""Envs as a service: ``coa serve-env`` serves registered ids over HTTP and WebSocket, and
:class:`RemoteEnv` (registered as ``coa/Remote-v0``) steps them from another process or
machine. The wire format (OpenEnv-compatible where it fits) is in :mod:`coa_envs.service.wire`.

Only the client is imported here; the server (fastapi, uvicorn) loads from
:mod:`coa_envs.service.app` when serving.
"""

from coa_envs.service.client import RemoteEnv, RemoteEnvConfig, RemoteEnvError

__all__ = ["RemoteEnv", "RemoteEnvConfig", "RemoteEnvError"]
