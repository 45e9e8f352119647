"""coa-envs: Chain-of-Agents environments for Gymnasium.

Importing the package registers every id in ``envs_registry.yaml`` with Gymnasium, so
``gym.make("coa/AIME24-v1")`` works after ``import coa_envs``. The import is kept light
(no torch, no transformers): heavy backends load inside the tool that needs them.
"""

from coa_envs.env import CoAEnv
from coa_envs.registry import ids, register_all
from coa_envs.types import ErrorKind, Reward, RewardResult, Task, Tool, ToolContext, ToolResult

__all__ = ["CoAEnv", "ErrorKind", "Reward", "RewardResult", "Task", "Tool", "ToolContext", "ToolResult", "ids"]
__version__ = "0.1.0"

register_all()
