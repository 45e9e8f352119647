"""Where packed-row attention used to live; it is :mod:`trainers.common.attention` now (kept for one release)."""

from trainers.common.attention import ATTENTION_CHOICES, VARLEN_NAME, register_varlen_attention, set_attention

__all__ = ["ATTENTION_CHOICES", "VARLEN_NAME", "register_varlen_attention", "set_attention"]
