"""The verifiers plugin package for coa envs: ``--env.taskset.id coa_verifiers``.

verifiers imports tasksets, envs and harnesses by top-level package name and takes the
subclasses each exports in ``__all__``; the implementation is
:mod:`trainers.adapters.verifiers_env`.
"""

from trainers.adapters.verifiers_env import CoAChatHarness, CoATaskset, CoAVerifiersEnv

__all__ = ["CoAChatHarness", "CoATaskset", "CoAVerifiersEnv"]
