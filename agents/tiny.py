"""A tiny tokenizer and a tiny random-weight model, built locally, for tests and benchmarks.

Nothing here downloads anything: the tokenizer is a byte-level BPE trained in-process with
the ``tokenizers`` library on synthetic Chain-of-Agents text, and the model is a Llama
architecture (with biased attention projections, like Qwen2) from a config with random
weights. The SFT, RL and agents tests all build on this module, so its API is stable:

* :func:`train_tiny_tokenizer` -> ``transformers.PreTrainedTokenizerFast`` with a
  ChatML chat template, ``eos_token="<|im_end|>"`` and ``pad_token="<|endoftext|>"``.
* :func:`build_tiny_model` -> ``transformers.LlamaForCausalLM`` sized to the tokenizer.
* :func:`save_tiny` -> a directory that ``AutoTokenizer/AutoModelForCausalLM.from_pretrained``
  load offline.

Why no pre-tokenisation regex: GPT-2 style pre-tokenisers split at punctuation/whitespace,
so merges could never span a tag join such as ``"</think>\\n<"``. Real tokenizers do merge
across such joins in places, which is exactly what makes re-tokenising a concatenated
trajectory shift token boundaries. Training on whole strings makes that hazard certain
here, so the token-exactness tests of trajectories actually test something.

Why Llama and not Qwen2 as the config class: transformers 5 forces its own
``Qwen2Tokenizer`` (with Qwen's pre-tokenisation regex) on any directory whose config says
``model_type: qwen2``, silently changing how our tokenizer encodes. For a Llama config it
honours ``tokenizer_class: TokenizersBackend`` from ``tokenizer_config.json``.
``attention_bias=True`` gives Qwen2's biased q/k/v projections (and an o bias).

Heavy imports (transformers, tokenizers, torch) happen inside the functions.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from coa_envs.vocabulary import BUILTIN_TOOLS, ROLE_TAGS, coa_tags, tool_names

__all__ = [
    "CHATML_TEMPLATE",
    "COA_TAGS",
    "SPECIAL_TOKENS",
    "build_tiny_model",
    "load_tiny",
    "save_tiny",
    "synthetic_coa_texts",
    "train_tiny_tokenizer",
]

#: Every tag of the CoA protocol with the built-in tools (roles, tools, observation, answer);
#: :func:`coa_envs.vocabulary.coa_tags` adds tools registered since, and the tokenizer trains on those.
COA_TAGS: tuple[str, ...] = coa_tags(BUILTIN_TOOLS)

#: ``<|endoftext|>`` pads, ``<|im_end|>`` ends an assistant turn (eos).
SPECIAL_TOKENS: tuple[str, ...] = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

#: ChatML, as used by Qwen2 models: one block per message, optional generation prompt. With
#: ``tools`` it renders function calling the way Qwen2.5/Hermes models do (the definitions in
#: the system block, calls as ``<tool_call>`` JSON, results as ``<tool_response>`` user turns);
#: messages without tools render exactly as plain ChatML.
CHATML_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\n\n' }}{%- endif %}"
    "{{- '# Tools\n\nYou may call functions. Their signatures are within <tools></tools>:\n<tools>' }}"
    "{%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\n</tools>\n\nTo call a function, write a JSON object with its name and arguments within "
    "<tool_call></tool_call> tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if tools and loop.first and message['role'] == 'system' %}"
    "{%- elif message['role'] == 'assistant' and message['tool_calls'] is defined and message['tool_calls'] %}"
    "{{- '<|im_start|>assistant\n' + (message['content'] or '') }}"
    "{%- for call in message['tool_calls'] %}"
    "{%- set fn = call['function'] %}"
    "{{- '\n<tool_call>\n{\"name\": ' + (fn['name'] | tojson) + ', \"arguments\": ' }}"
    "{%- if fn['arguments'] is string %}{{- fn['arguments'] }}{%- else %}{{- fn['arguments'] | tojson }}{%- endif %}"
    "{{- '}\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{{- '<|im_start|>user\n<tool_response>\n' + message['content'] + '\n</tool_response><|im_end|>\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)

_WORD_TEXT = (
    "the of and to in is was for on that with by as at from his her which who what when "
    "where city river capital born year population author book film director company founded "
    "answer question search result page number total sum compute python print return def "
    "import math list value first second third largest smallest country river mountain"
)
_WORDS = tuple(_WORD_TEXT.split())


def synthetic_coa_texts(n: int = 400, seed: int = 0) -> list[str]:
    """Deterministic CoA-style trajectories that use every tag (every registered tool's too),
    for tokenizer training."""
    rng = random.Random(seed)

    def phrase(k: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(k))

    tools, roles = tool_names(), ROLE_TAGS  # read now: a tool registered since import is in the text
    texts = []
    for _ in range(n):
        parts = [f"<think>\n{phrase(rng.randint(4, 12))}\n</think>\n"]
        for _turn in range(rng.randint(1, 3)):
            role = rng.choice(roles)
            tool = rng.choice(tools)
            parts.append(f"<{role}>\n{phrase(rng.randint(3, 10))}\n</{role}>\n")
            query = f"print({rng.randint(0, 999)} + {rng.randint(0, 99)})" if tool == "code" \
                else phrase(rng.randint(2, 6))
            parts.append(f"<{tool}>{query}</{tool}>")
            parts.append(f"\n<observation>\n{phrase(rng.randint(3, 15))}\n</observation>\n\n")
        parts.append(f"<answer>{rng.choice([phrase(2), str(rng.randint(0, 9999))])}</answer>")
        texts.append("".join(parts))
    return texts


def train_tiny_tokenizer(texts: Iterable[str] | None = None, vocab_size: int = 512) -> Any:
    """Train a byte-level BPE on ``texts`` (default: :func:`synthetic_coa_texts`).

    Returns a ``transformers.PreTrainedTokenizerFast`` with the ChatML chat template.
    Merges may span tag joins (no pre-tokenisation regex; see the module docstring).
    Deterministic: the same texts and vocab size give the same tokenizer.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = list(texts) if texts is not None else synthetic_coa_texts()
    # ChatML scaffolding is text the model sees around every turn; include it.
    corpus += ["<|im_start|>system\nYou are a helpful agent.<|im_end|>\n<|im_start|>assistant\n"]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        additional_special_tokens=["<|im_start|>"],
        clean_up_tokenization_spaces=False,
        model_max_length=32768,
    )
    fast.chat_template = CHATML_TEMPLATE
    fast.padding_side = "left"  # decoder-only batched generation pads on the left
    return fast


def build_tiny_model(
    tokenizer: Any,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int | None = 2,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 8192,
    seed: int = 0,
    **config_overrides: Any,
) -> Any:
    """A Qwen2-style ``LlamaForCausalLM`` with random weights sized to ``tokenizer`` (seeded).

    ``config_overrides`` go straight into ``LlamaConfig`` (e.g. ``vocab_size`` to pad the
    embedding, ``torch_dtype``). The model is returned in eval mode on CPU.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=config_overrides.pop("vocab_size", len(tokenizer)),
        hidden_size=hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads or heads,
        intermediate_size=intermediate_size or hidden_size * 2,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        attention_bias=config_overrides.pop("attention_bias", True),
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **config_overrides,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval()


def save_tiny(
    directory: str | Path,
    tokenizer: Any | None = None,
    model: Any | None = None,
    **model_kwargs: Any,
) -> Path:
    """Write a tokenizer and model to ``directory`` so ``from_pretrained`` works offline.

    Builds whichever of the two is not given (``model_kwargs`` go to
    :func:`build_tiny_model`). Returns the directory.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = tokenizer if tokenizer is not None else train_tiny_tokenizer()
    model = model if model is not None else build_tiny_model(tokenizer, **model_kwargs)
    tokenizer.save_pretrained(directory)
    model.save_pretrained(directory)
    _pin_tokenizer_config(directory)
    return directory


def _pin_tokenizer_config(directory: Path) -> None:
    """Make ``AutoTokenizer`` load our tokenizer.json as-is, left-padded for generation."""
    import json

    path = directory / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "TokenizersBackend"
    config["padding_side"] = "left"
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")


def load_tiny(directory: str | Path) -> tuple[Any, Any]:
    """Load ``(tokenizer, model)`` saved by :func:`save_tiny` (no network)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(directory), local_files_only=True)
    return tokenizer, model.eval()
