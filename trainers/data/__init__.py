"""SFT data: read trajectories and the seed's SFT formats, tokenise with exact loss masks, pack.

Importing this package imports no torch or transformers; tokenisation uses whatever
tokenizer object the caller passes.
"""

from trainers.data.dataset import PreparedData, epoch_order, prepare_packs, split_eval
from trainers.data.formats import (
    DataFormatError,
    FormatErrorKind,
    Message,
    SftSample,
    Span,
    load_samples,
    sample_from_trajectory,
    split_observations,
)
from trainers.data.packing import (
    Pack,
    TruncationPolicy,
    TruncationReport,
    pack_samples,
    pack_to_batch,
    truncate_samples,
)
from trainers.data.tokenize import IGNORE_INDEX, TemplateError, TokenizedSample, tokenize_sample

__all__ = [
    "IGNORE_INDEX",
    "DataFormatError",
    "FormatErrorKind",
    "Message",
    "Pack",
    "PreparedData",
    "SftSample",
    "Span",
    "TemplateError",
    "TokenizedSample",
    "TruncationPolicy",
    "TruncationReport",
    "epoch_order",
    "load_samples",
    "pack_samples",
    "pack_to_batch",
    "prepare_packs",
    "sample_from_trajectory",
    "split_eval",
    "split_observations",
    "tokenize_sample",
    "truncate_samples",
]
