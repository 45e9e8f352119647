"""Where the SFT trainer's model plumbing used to live; it is shared now (kept for one release).

Loading and saving: :mod:`trainers.common.loading`; the packed-row loss: :mod:`trainers.common.packed`.
"""

from trainers.common.loading import compile_layers, save_for_inference, unwrap
from trainers.common.packed import loss_sum, token_logps

__all__ = ["compile_layers", "loss_sum", "save_for_inference", "token_logps", "unwrap"]
