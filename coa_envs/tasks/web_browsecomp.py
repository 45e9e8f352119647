"""BrowseComp loader: the official encrypted CSV, decrypted row by row with its canary.

OpenAI publishes BrowseComp as a CSV whose ``problem`` and ``answer`` cells are encrypted
so that the plain text never sits on the web. Each row's ``canary`` string is the password:
the key is SHA-256(canary) repeated to the ciphertext's length, XOR-ed with the
base64-decoded cell. :func:`decrypt_cell` follows that published procedure byte for byte;
:func:`encrypt_cell` is its inverse (used to build test fixtures in the official format).
"""

from __future__ import annotations

import base64
import binascii
import csv
import hashlib
from pathlib import Path

from coa_envs.tasks import TaskDataError
from coa_envs.tasks.web_common import data_dir_candidates, missing_data_error
from coa_envs.types import Task

__all__ = ["CSV_NAME", "CSV_URL", "decrypt_cell", "encrypt_cell", "load_browsecomp_csv"]

CSV_NAME = "browse_comp_test_set.csv"
CSV_URL = "https://openaipublic.blob.core.windows.net/simple-evals/browse_comp_test_set.csv"
_REQUIRED = ("problem", "answer", "canary")


def _keystream(password: str, length: int) -> bytes:
    digest = hashlib.sha256(password.encode("utf-8")).digest()
    repeats, rest = divmod(length, len(digest))
    return digest * repeats + digest[:rest]


def decrypt_cell(ciphertext_b64: str, canary: str) -> str:
    """Decrypt one CSV cell: base64-decode, XOR with the canary-derived key, UTF-8 decode."""
    data = base64.b64decode(ciphertext_b64)
    key = _keystream(canary, len(data))
    return bytes(a ^ b for a, b in zip(data, key, strict=True)).decode("utf-8")


def encrypt_cell(plaintext: str, canary: str) -> str:
    """Inverse of :func:`decrypt_cell` (XOR is its own inverse)."""
    data = plaintext.encode("utf-8")
    key = _keystream(canary, len(data))
    return base64.b64encode(bytes(a ^ b for a, b in zip(data, key, strict=True))).decode("ascii")


def _find_csv(path: Path | None) -> tuple[Path | None, list[str]]:
    if path is not None:
        if path.is_dir():
            path = path / CSV_NAME
        return (path if path.is_file() else None), [str(path)]
    candidates = data_dir_candidates(CSV_NAME, f"browsecomp/{CSV_NAME}", f"BrowseComp/{CSV_NAME}")
    found = next((c for c in candidates if c.is_file()), None)
    return found, [str(c) for c in candidates]


def load_browsecomp_csv(path: Path | None) -> list[Task]:
    """Tasks from the official CSV (ids ``browsecomp-<row>``, row = 0-based data row)."""
    found, tried = _find_csv(path)
    if found is None:
        raise missing_data_error("browsecomp", tried)
    tasks: list[Task] = []
    with open(found, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in _REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise TaskDataError(found, 0, missing[0], "is missing from the CSV header")
        for index, row in enumerate(reader):
            canary = row.get("canary") or ""
            if not canary:
                raise TaskDataError(found, index, "canary")
            plain: dict[str, str] = {}
            for column in ("problem", "answer"):
                try:
                    plain[column] = decrypt_cell(row.get(column) or "", canary)
                except (binascii.Error, UnicodeDecodeError, ValueError):
                    raise TaskDataError(
                        found, index, column, "does not decrypt with the row's canary"
                    ) from None
                if not plain[column].strip():
                    raise TaskDataError(found, index, column)
            metadata = {"dataset": "browsecomp"}
            if row.get("problem_topic"):
                metadata["topic"] = row["problem_topic"]
            tasks.append(
                Task(
                    task_id=f"browsecomp-{index}",
                    question=plain["problem"],
                    gold=(plain["answer"],),
                    metadata=metadata,
                )
            )
    return tasks
