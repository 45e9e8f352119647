"""``model.compile``: every decoder layer is compiled in place, checkpoints keep their keys,
and a compiled run trains exactly as the eager one (the slow test; compiling takes minutes on
a busy 2-core CPU, ~20 s on a GPU machine's CPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from trainers.sft import load_config, train  # noqa: E402
from trainers.sft.model import compile_layers  # noqa: E402


def test_compile_layers_compiles_each_decoder_layer_and_keeps_state_dict_keys(tiny_model):
    keys = list(tiny_model.state_dict())
    assert compile_layers(tiny_model) == len(tiny_model.get_decoder().layers)
    assert all(layer._compiled_call_impl is not None for layer in tiny_model.get_decoder().layers)
    assert list(tiny_model.state_dict()) == keys  # checkpoints load into an eager model


def test_compile_refuses_a_model_without_decoder_layers():
    class NoLayers(torch.nn.Module):
        def get_decoder(self):
            return torch.nn.Linear(2, 2)

    with pytest.raises(ValueError, match=r"no decoder\.layers"):
        compile_layers(NoLayers())


@pytest.mark.slow
def test_a_compiled_run_trains_like_the_eager_run(tmp_path, write_messages_data):
    data = write_messages_data(tmp_path / "d.jsonl", 16, 4)

    def config(out, compiled):
        return load_config(values={
            "model": {"path": "tiny", "compile": compiled,
                      "tiny": {"vocab_size": 384, "hidden_size": 32, "layers": 2, "heads": 4,
                               "kv_heads": 2}},
            "data": {"train_path": str(data), "max_seq_len": 256, "pack_len": 512},
            "optim": {"max_steps": 4, "learning_rate": 3e-3},
            "resources": {"torch_threads": 1},
            "bookkeeping": {"output_dir": str(tmp_path / out), "progress": False,
                            "tensorboard": False}})

    eager, compiled = train(config("eager", False)), train(config("compiled", True))
    assert compiled.losses == pytest.approx(eager.losses, rel=1e-4)
