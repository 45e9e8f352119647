"""Multi-agent teacher systems whose runs become CoA training data.

A team (manager, tool agents acting through the env's own tools, a reflector and a verifier,
each on its own OpenAI-compatible endpoint) plays an env's tasks as one ordinary agent; its
episodes carry the log of every agent's contribution, which ``trainers.distill`` converts into
single-model CoA trajectories. ``coa teach ENV --system SYSTEM.yaml`` runs it.

Importing this package imports no agent framework; smolagents loads when a team is built.
"""

from agents.teachers.agent import TeacherAgent, teacher_factory
from agents.teachers.bridge import EVENT_KINDS, TeacherBridge, TeacherEvent
from agents.teachers.config import (
    EndpointConfig,
    SystemConfigError,
    TeacherSystemConfig,
    load_system,
    system_from_dict,
)

__all__ = [
    "EVENT_KINDS",
    "EndpointConfig",
    "SystemConfigError",
    "TeacherAgent",
    "TeacherBridge",
    "TeacherEvent",
    "TeacherSystemConfig",
    "load_system",
    "system_from_dict",
    "teacher_factory",
]
