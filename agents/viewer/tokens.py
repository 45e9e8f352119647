"""Token-level view of a trajectory: each token's text and whether the loss sees it.

The loss mask comes from :meth:`agents.trajectory.Trajectory.full_loss_mask` (prompt and
observation tokens 0, generated tokens 1), so the page shows exactly what trainers use.
Token text needs the run's tokenizer, loaded offline (``local_files_only``) on first use and
cached; when it cannot be loaded the page shows ids and counts, and says why.

Why not ``tokenizer.decode([id])`` per token: SentencePiece drops a token's leading space when
it is decoded alone, and a byte-level token can hold half a UTF-8 character. Decoding a short
window and taking the suffix (the incremental detokenisation vLLM streams with) gives pieces
whose concatenation is the segment's text; a token that ends inside a character gets an
empty piece and the character goes to the token that completes it.
"""

from __future__ import annotations

import threading
from typing import Any

from agents.trajectory import Trajectory
from agents.viewer.episode import jsonable

__all__ = ["MAX_TOKENS_SHOWN", "TokenizerCache", "decode_pieces", "token_view"]

#: Tokens listed per episode; beyond this the view says how many were left out.
MAX_TOKENS_SHOWN = 32_768


class TokenizerCache:
    """``spec -> tokenizer`` loaded once per spec; a failure is cached as its message."""

    def __init__(self) -> None:
        self._loaded: dict[str, tuple[Any, str | None]] = {}
        self._lock = threading.Lock()

    def get(self, spec: str | None) -> tuple[Any, str | None]:
        if not spec:
            return None, "no tokenizer is known for this run (give one with coa view --tokenizer NAME_OR_DIR)"
        with self._lock:
            if spec not in self._loaded:
                self._loaded[spec] = self._load(spec)
            return self._loaded[spec]

    @staticmethod
    def _load(spec: str) -> tuple[Any, str | None]:
        try:
            from transformers import AutoTokenizer
        except ImportError:
            return None, "transformers is not installed (pip install coa-envs[llm]); showing token ids"
        try:
            from agents.models import resolve_model

            # a catalogue name (smollm2-135m, what summary.json records) is its converted directory
            return AutoTokenizer.from_pretrained(resolve_model(spec), local_files_only=True), None
        except Exception as exc:  # any loading failure is shown, never raised into the server
            return None, f"cannot load tokenizer {spec!r} offline: {type(exc).__name__}: {str(exc)[:300]}"


def decode_pieces(tokenizer: Any, ids: list[int]) -> list[str]:
    """The text each token adds, in order; ``"".join`` of the pieces is ``decode(ids)``."""
    def decode(window: list[int]) -> str:
        return tokenizer.decode(window, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    pieces: list[str] = []
    prefix, read = 0, 0  # ids[prefix:read] is context already emitted; it fixes spacing
    for i in range(len(ids)):
        before = decode(ids[prefix:read]) if read > prefix else ""
        text = decode(ids[prefix:i + 1])
        if text.endswith("\ufffd") and i + 1 < len(ids):  # inside a multi-byte character
            pieces.append("")
            continue
        pieces.append(text[len(before):] if text.startswith(before) else text)
        prefix, read = read, i + 1
    return pieces


def token_view(trajectory: Trajectory, tokenizer: Any, tokenizer_error: str | None) -> dict[str, Any]:
    """Per segment (prompt first): ``[id, piece or None, loss 0/1, logprob or None]`` rows."""
    blocks = [("prompt", -1, trajectory.prompt_ids, [])]
    blocks += [(s.kind, i, s.token_ids, s.logprobs) for i, s in enumerate(trajectory.segments)]
    mask = trajectory.full_loss_mask()
    shown, position, out = 0, 0, []
    for kind, index, ids, logprobs in blocks:
        take = ids[: max(0, MAX_TOKENS_SHOWN - shown)]
        pieces = decode_pieces(tokenizer, take) if tokenizer is not None and take else [None] * len(take)
        has_logprobs = len(logprobs) == len(ids)
        rows = [[token, piece, mask[position + j], logprobs[j] if has_logprobs else None]
                for j, (token, piece) in enumerate(zip(take, pieces, strict=True))]
        out.append({"kind": kind, "segment": index, "count": len(ids), "tokens": rows})
        shown += len(take)
        position += len(ids)
    total = len(mask)
    return jsonable({
        "blocks": out, "total": total, "shown": shown, "trained": sum(mask),
        "decoded": tokenizer is not None, "tokenizer_error": tokenizer_error,
    })
