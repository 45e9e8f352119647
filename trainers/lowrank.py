"""A fine-tuned model as a small LoRA adapter: the low-rank extraction of its weight delta.

A trained agent is shipped as what it changed, not as a second copy of the model: for every
linear layer of the decoder, the delta ``W_tuned - W_base`` is factored by SVD and its top
``rank`` singular directions kept as a peft LoRA pair (``B = U_r sqrt(S_r)``,
``A = sqrt(S_r) V_r^T``, ``lora_alpha = rank`` so the scale is 1). Saved in float16, SmolLM2's
30 layers x 7 projections at rank 8 take ~4.9 MB.

What is lost is measured, never assumed: the share of each delta's energy (squared Frobenius
norm) the kept directions hold, the deltas of parameters an adapter cannot carry (embeddings,
norms; zero when training used LoRA), and the next-token KL between the tuned model and
base + adapter on probe texts. A model that was itself trained as low-rank adapters of total
rank <= ``rank`` (LoRA SFT, then LoRA RL on the merged result) comes back exactly, up to float16.

Loading goes through :func:`agents.models.load_causal_lm` (a catalogue name, a directory, or
a peft adapter directory with its base). Torch and peft are imported inside the functions.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ExtractionReport", "extract_adapter"]


@dataclass
class ExtractionReport:
    """What the extraction kept and lost (written as ``extraction.json`` beside the adapter)."""

    tuned: str
    base: str
    rank: int
    dtype: str
    modules: int
    adapter_bytes: int
    energy_kept: float
    """Share of the summed squared Frobenius norm of every linear delta the adapter keeps."""
    energy_kept_min: float
    """The lowest share over single layers."""
    dropped_delta_norm: dict[str, float] = field(default_factory=dict)
    """Frobenius norm of each changed parameter an adapter cannot hold, relative to its weight."""
    probe_kl: float = 0.0
    """Mean next-token KL(tuned || base + adapter) over the probe texts' positions."""
    probe_top1_agreement: float = 1.0
    """Share of positions where both pick the same next token."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _linear_names(model: Any) -> list[str]:
    import torch

    return [name for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear) and "lm_head" not in name]


def _factor(delta: Any, rank: int) -> tuple[Any, Any, float]:
    """``(B, A, energy kept)`` with ``B @ A`` the best rank-``rank`` approximation of ``delta``."""
    import torch

    u, s, vh = torch.linalg.svd(delta.double(), full_matrices=False)
    total = float((s ** 2).sum())
    keep = min(rank, s.numel())
    root = s[:keep].sqrt()
    b = (u[:, :keep] * root).float()
    a = (root[:, None] * vh[:keep]).float()
    if keep < rank:  # pad to the adapter's rank with zero directions
        b = torch.cat([b, b.new_zeros(b.shape[0], rank - keep)], dim=1)
        a = torch.cat([a, a.new_zeros(rank - keep, a.shape[1])], dim=0)
    kept = float((s[:keep] ** 2).sum())
    return b, a, (kept / total) if total > 0 else 1.0


def _probe_kl(tuned: Any, merged: Any, tokenizer: Any, probes: list[str]) -> tuple[float, float]:
    import torch

    kls, agree, count = 0.0, 0.0, 0
    with torch.no_grad():
        for text in probes:
            ids = torch.tensor([tokenizer.encode(text)])
            p = torch.log_softmax(tuned(ids).logits.float(), -1)[0]
            q = torch.log_softmax(merged(ids).logits.float(), -1)[0]
            kls += float((p.exp() * (p - q)).sum(-1).sum())
            agree += float((p.argmax(-1) == q.argmax(-1)).sum())
            count += p.shape[0]
    return kls / max(count, 1), agree / max(count, 1)


def extract_adapter(tuned: str, base: str, out: str | Path, *, rank: int = 8, dtype: str = "float16",
                    probes: list[str] | None = None) -> ExtractionReport:
    """Write ``out`` (a peft adapter directory: ``adapter_config.json``,
    ``adapter_model.safetensors``, ``extraction.json``) holding ``tuned - base`` at ``rank``.
    ``base`` is written as the adapter's ``base_model_name_or_path`` as given (a catalogue
    name stays a name, so the adapter loads on any machine that has the catalogue model)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import save_file

    from agents.models import load_causal_lm

    if rank < 1:
        raise ValueError(f"rank={rank} must be >= 1")
    if dtype not in ("float16", "bfloat16", "float32"):
        raise ValueError(f"dtype={dtype!r}: choose float16, bfloat16 or float32")
    tuned_model, tokenizer = load_causal_lm(tuned, dtype=torch.float32)
    base_model, _ = load_causal_lm(base, dtype=torch.float32)
    tuned_state, base_state = tuned_model.state_dict(), base_model.state_dict()
    if set(tuned_state) != set(base_state):
        raise ValueError(f"{tuned} and {base} are different architectures (their parameters differ)")
    names = _linear_names(base_model)
    factors, energies, total, kept = {}, [], 0.0, 0.0
    for name in names:
        delta = tuned_state[f"{name}.weight"] - base_state[f"{name}.weight"]
        b, a, share = _factor(delta, rank)
        energy = float((delta.double() ** 2).sum())
        total, kept = total + energy, kept + share * energy
        energies.append(share)
        factors[name] = (a, b)
    linear = {f"{n}.weight" for n in names}
    dropped = {}
    for key, value in tuned_state.items():
        if key in linear or (key.startswith("lm_head") and tuned_model.config.tie_word_embeddings):
            continue
        change = float((value - base_state[key]).float().norm())
        if change > 0:
            dropped[key] = change / max(float(base_state[key].float().norm()), 1e-12)
    adapter_model = get_peft_model(base_model, LoraConfig(
        r=rank, lora_alpha=rank, lora_dropout=0.0, target_modules=sorted({n.rsplit(".", 1)[-1] for n in names}),
        task_type="CAUSAL_LM"))
    tensors = {}
    cast = getattr(torch, dtype)
    for name, (a, b) in factors.items():
        prefix = f"base_model.model.{name}"
        tensors[f"{prefix}.lora_A.weight"] = a.to(cast).contiguous()
        tensors[f"{prefix}.lora_B.weight"] = b.to(cast).contiguous()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    adapter_model.peft_config["default"].base_model_name_or_path = base
    adapter_model.peft_config["default"].save_pretrained(str(out))
    save_file(tensors, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    merged, _ = load_causal_lm(str(out), dtype=torch.float32)
    kl, agreement = _probe_kl(tuned_model, merged, tokenizer, probes or _DEFAULT_PROBES)
    report = ExtractionReport(
        tuned=str(tuned), base=str(base), rank=rank, dtype=dtype, modules=len(names),
        adapter_bytes=(out / "adapter_model.safetensors").stat().st_size,
        energy_kept=kept / total if total > 0 else 1.0, energy_kept_min=min(energies, default=1.0),
        dropped_delta_norm={k: round(v, 6) for k, v in sorted(dropped.items())},
        probe_kl=kl, probe_top1_agreement=agreement)
    (out / "extraction.json").write_text(json.dumps(report.to_dict(), indent=2), encoding="utf-8")
    return report


_DEFAULT_PROBES = [
    "<|im_start|>user\nWhich company employed the founder of Chikrov Optics?<|im_end|>\n<|im_start|>assistant\n"
    "<plan>1. Who founded Chikrov Optics? 2. Which company employed that person?</plan>\n"
    "<wiki_search>Chikrov Optics founder</wiki_search>",
    "<|im_start|>user\nIn which year did Kasimir Pemberton join the institute?<|im_end|>\n<|im_start|>assistant\n"
    "<plan>1. Search for Kasimir Pemberton staff profile. 2. Read the page for the year joined.</plan>\n"
    "<web_search>Kasimir Pemberton staff profile</web_search>",
]
