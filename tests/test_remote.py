"""Remote execution without a network: a weightless client's trace, serialized as nnsight's ``RemoteBackend`` sends
it, run against a separate stock ``TransformersModel`` of the same checkpoint (the server, as NDIF holds it), gives
every standard value a local trace gives, bit for bit, writes included, and leaves the server's modules as they were.

The server is what nnsight's own serialization tests stand up: ``RequestModel.deserialize`` with the server model's
persistent objects (its modules and interleaver), then the tracer executed against them; the saved values go back
through ``torch.save``, as a reply does, and are pushed into the client's frame as ``RemoteBackend`` pushes them.
"""

from __future__ import annotations

import dataclasses
import io

import pytest
import torch
from nnsight import TransformersModel
from nnsight.ndif import pull_env
from nnsight.schema.request import RequestModel
from nnsight.tracing.backend import Backend
from nnsight.tracing.tracer import _saves, save
from nnsight.tracing.util import push
from standard_reads import every_value

from envoys import StandardizedTransformer, Unavailable
from envoys.core import backends
from envoys.testing import CONTRACTS, NAMES, chat_prompt, noise_image
from envoys.testing.contract import Packed
from envoys.towers.per_image import BlockDiagonal
from instrument import installed
from instrument.install import ADDED
from instrument.show import main
from instrument.stored import site_labels
from rewrites.attention import KERNEL_SITE

IMAGES = [noise_image(32, 32, seed=0)]


def first_with(fact) -> str | None:
    """The first tiny checkpoint whose contract row has ``fact``; None where this release builds none."""
    return next((name for name in NAMES if fact(CONTRACTS[name])), None)


#: The layouts the round trip carries: a scatter host (LLaVA), a windowed per-image tower (Qwen2.5-VL), DeepStack
#: (Qwen3-VL), a pooling projector with bidirectional image attention (Gemma 3); then, chosen by their facts, a packed
#: tower that runs one kernel call under a block-diagonal mask, a tower with prefix rows, and a text model that
#: receives the features scaled.
CHECKPOINTS = tuple(name for name in dict.fromkeys((
    "llava-siglip", "qwen2_5_vl", "qwen3_vl", "gemma3",
    first_with(lambda row: isinstance(row.stream, Packed) and row.pattern.unavailable is None),
    first_with(lambda row: row.prefix > 0),
    first_with(lambda row: row.embedding_multiplier != 1),
)) if name is not None)


class StockServer(Backend):
    """Runs a trace as NDIF would: serialized by the client as ``RemoteBackend`` serializes it, executed against
    ``server`` (a stock nnsight model of the same checkpoint), the saves sent back as a reply's bytes."""

    def __init__(self, server: TransformersModel) -> None:
        self.server = server

    def __call__(self, tracer) -> None:
        pull_env()  # as RemoteBackend does first: packages not installed travel by value
        request = RequestModel.serialize(tracer)
        restored = RequestModel.deserialize(request, self.server._remoteable_persistent_objects())
        restored.execute(restored.info.code)
        saved = {name: value for name, value in restored.info.frame.f_locals.items() if id(value) in _saves()}
        reply = io.BytesIO()
        torch.save(saved, reply)
        reply.seek(0)
        result = torch.load(reply, weights_only=False)
        for value in result.values():
            save(value)
        push(tracer.info.frame, result)


def library_state(model: TransformersModel) -> list[tuple[str, tuple[str, ...]]]:
    """What the library would have added to the server's modules: installed rules, or its attributes."""
    return [(name, tuple(sorted(set(module.__dict__) & {*ADDED, "_supports_mm_encoder_outputs"})))
            for name, module in model._module.named_modules()
            if installed(module) or set(module.__dict__) & {*ADDED, "_supports_mm_encoder_outputs"}]


@pytest.fixture(scope="module", params=CHECKPOINTS)
def sides(request, tiny_checkpoint):
    """(weightless client, local model, stock server) of one checkpoint."""
    path = tiny_checkpoint(request.param)
    loading = {"task": "image-text-to-text", "attn_implementation": "eager"}
    client = StandardizedTransformer(path, **loading)
    local = StandardizedTransformer(path, dispatch=True, **loading)
    server = TransformersModel(str(path), dispatch=True, **loading)
    return client, local, StockServer(server)


def read(model, envoy, name, prompt, backend=None, write: bool = False, replacement=None):
    """``envoy.name`` in a trace of ``model`` (run by ``backend``, or locally), or, with ``write``, the logits after
    it is written as ``value * 0.5 + 1``, or assigned ``replacement`` where one is given."""
    with model.trace(prompt, images=IMAGES, backend=backend) as tracer:
        if write and replacement is not None:
            setattr(envoy, name, replacement)
            got = model.logits.save()
        elif write:
            value = getattr(envoy, name)
            setattr(envoy, name, value * 0.5 + 1)
            got = model.logits.save()
        else:
            got = getattr(envoy, name).save()
        tracer.stop()
    return got


def writable(prop, value) -> bool:
    return prop.read_only is None and isinstance(value, torch.Tensor) and value.is_floating_point()


def test_every_value_and_write_is_the_local_one(sides):
    client, local, server = sides
    prompt = chat_prompt(local.processor, 1, "What is in the picture?")
    at = {envoy.path: envoy for envoy in client.modules()}
    compared, written, failures = 0, 0, []
    for envoy, name, prop in every_value(local, prompt, IMAGES):
        label = f"{envoy.path}.{name}"
        expected = read(local, envoy, name, prompt)
        got = read(client, at[envoy.path], name, prompt, server)
        compared += 1
        if type(got) is not type(expected) if not isinstance(expected, torch.Tensor) else type(got) is not torch.Tensor:
            failures.append(f"{label}: came back as {type(got).__name__}")
        elif isinstance(expected, torch.Tensor) and not torch.equal(got, expected):
            failures.append(f"{label}: differs")
        if writable(prop, expected):
            written += 1
            replacement = None
            if isinstance(prop, BlockDiagonal):  # assigned before its calls run, its blocks alone changed
                between = 0.0 if name == "attention_probabilities" else torch.finfo(expected.dtype).min
                replacement = torch.where(expected == between, expected, expected * 0.5 + 1)
            if not torch.equal(read(client, at[envoy.path], name, prompt, server, write=True, replacement=replacement),
                               read(local, envoy, name, prompt, write=True, replacement=replacement)):
                failures.append(f"{label}: its write differs")
    assert compared > 20 and written > 10 and not failures, failures
    assert not client.dispatched, "the client loaded weights"
    assert library_state(server.server) == []


def test_the_client_reads_no_weight(sides):
    client, _, _ = sides
    assert {parameter.device.type for parameter in client._module.parameters()} == {"meta"}


def test_several_image_invokes_are_refused_before_the_model_runs(sides):
    """Each invoke's part of a vision value is found by the library's interleaver, which a server replaces."""
    client, _, server = sides
    prompt = chat_prompt(client.processor, 1, "What is in the picture?")
    calls = []
    handle = server.server._module.register_forward_pre_hook(lambda *args: calls.append(1))
    try:
        with pytest.raises(NotImplementedError, match="runs on a server .* one invoke that carries every image"):
            with client.trace(backend=server) as tracer:
                with tracer.invoke(prompt, images=IMAGES):
                    client.vision.image_features.save()
                with tracer.invoke(prompt, images=[noise_image(32, 32, seed=1)]):
                    client.vision.image_features.save()
    finally:
        handle.remove()
    assert calls == [] and library_state(server.server) == []


def generated(model, backend, prompt, read):
    """What ``read(model)`` gives at step 0 of a two-token generate (with the ids), or the error it raises."""
    try:
        with model.generate(prompt, images=IMAGES, max_new_tokens=2, backend=backend) as tracer:
            value = read(model).save()
            ids = tracer.result.save()
    except Unavailable as error:
        return str(error)
    return value, ids


STEP_0 = {
    "image_token_mask": lambda model: model.vision.image_token_mask,
    "vision.layers[0].layer_output": lambda model: model.vision.layers[0].layer_output,
    "image_features": lambda model: model.vision.image_features,
    "logits": lambda model: model.logits,
}


def test_generate_serves_the_image_values_at_step_0_as_locally(sides):
    """As locally: each value at step 0, in the forward's order (the stock model would encode the images before step
    0's forward), or the same reason where the family's generate does not compute it in a forward."""
    client, local, server = sides
    broken = local.support().get("generate")
    if broken is not None:  # the family's known transformers bug breaks its generate here, locally too
        pytest.skip(f"generate: {broken}")
    prompt = chat_prompt(local.processor, 1, "What is in the picture?")
    for name, read in STEP_0.items():
        expected, got = generated(local, None, prompt, read), generated(client, server, prompt, read)
        if isinstance(expected, str):
            assert got == expected, name
        else:
            assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True)), name
    assert not client.dispatched and library_state(server.server) == []


def test_a_server_on_another_release_resolves_its_own_labels_or_says_why(sides, monkeypatch):
    """The labels are read against the forward at hand: where it is not the client's (another release), the
    snapshot store's record of the server's release; where the store records none, the values are Unavailable."""
    client, local, server = sides
    prompt = chat_prompt(local.processor, 1, "What is in the picture?")
    with local.trace(prompt, images=IMAGES) as tracer:
        expected = local.vision.image_features.save()
        tracer.stop()
    elsewhere = dataclasses.replace(client.site_plan, release="transformers-0.0.1")  # as if built on another release
    monkeypatch.setattr(client, "site_plan", elsewhere)
    recorded = all(backends.recorded_labels(forward.stem, backends.release()) is not None
                   for forwards in elsewhere.forwards.values() for forward in forwards)
    if recorded:  # the store records every forward on this release: its record gives the labels
        with client.trace(prompt, images=IMAGES, backend=server) as tracer:
            features = client.vision.image_features.save()
            tracer.stop()
        assert torch.equal(features, expected)
    monkeypatch.setattr(backends, "recorded_labels", lambda stem, release: None)
    with pytest.raises(Unavailable, match=r"vision.image_features is unavailable: .*forward.* here \(transformers-"
                                          r"[\d.]+\) is not the forward the client's labels came from \(transformers-"
                                          r"0.0.1\), and the snapshot store has no record of it on"):
        with client.trace(prompt, images=IMAGES, backend=server) as tracer:
            client.vision.image_features.save()
    assert library_state(server.server) == []


def test_the_store_s_record_of_a_release_gives_nnsight_s_labels():
    """A site a release variant serves under another label: the store's sites line says both."""
    stem = "modeling_qwen2_5_vl.Qwen2_5_VLVisionAttention.forward"
    labels = backends.recorded_labels(stem, backends.release())
    assert labels is not None and labels["torch_split_0"] == "torch_split_0"
    assert site_labels("# rule r\n# sites: torch_split_0, attention_interface_1 (numbered attention_interface_2)\n") == {
        "torch_split_0": "torch_split_0", "attention_interface_1": "attention_interface_2"}
    assert backends.recorded_labels(stem, "transformers-0.0.1") is None


def test_saved_values_pickle_as_plain_tensors(sides, tmp_path):
    """A value served as a view of the model's tensor (a Qwen tower block's stream) or read-only (the mask)."""
    _, local, _ = sides
    prompt = chat_prompt(local.processor, 1, "What is in the picture?")
    with local.trace(prompt, images=IMAGES) as tracer:
        mask = local.vision.image_token_mask.save()
        stream = local.vision.layers[0].layer_output.save()
        features = local.vision.image_features.save()
        tracer.stop()
    assert type(mask) is not torch.Tensor  # served read-only: a subclass until it is pickled
    torch.save({"mask": mask, "features": features, "stream": stream}, tmp_path / "saved.pt")
    loaded = torch.load(tmp_path / "saved.pt")
    for name, value in (("mask", mask), ("features", features), ("stream", stream)):
        assert type(loaded[name]) is torch.Tensor and torch.equal(loaded[name], value)


def test_the_nnsight_spellings_read_the_values_on_a_stock_model(capsys, tiny_checkpoint):
    """``python -m instrument.show qwen3_vl --nnsight``: what a server without this package reads, read there."""
    assert main(["qwen3_vl", "--nnsight"]) == 0
    printed = capsys.readouterr().out.splitlines()
    spelled = dict(line.split(": ", 1) for line in printed[1:])
    path = tiny_checkpoint("qwen3_vl")
    stock = TransformersModel(str(path), task="image-text-to-text", attn_implementation="eager", dispatch=True)
    local = StandardizedTransformer(path, task="image-text-to-text", attn_implementation="eager", dispatch=True)
    # the kernel call as nnsight numbers it on this release (one higher on transformers 5.0)
    kernel, = (forward.labels[KERNEL_SITE] for forward in local.site_plan.forwards[local.layers[0].self_attn.path]
               if KERNEL_SITE in forward.labels)
    features = "model.model.source.inputs_embeds_masked_scatter_0.inputs[0][1]"
    probabilities = f"model.model.language_model.layers[0].self_attn.source.{kernel}.source.nn_functional_softmax_0.output"
    assert spelled["vision.image_features"].startswith(features)
    assert spelled["layers[i].self_attn.attention_probabilities"].startswith(probabilities)
    tower = "model.model.visual.blocks[0].attn.source.attention_interface_2.source.nn_functional_softmax_0.output"
    assert spelled["vision.layers[i].self_attn.attention_probabilities"].startswith(
        f"{tower}  (occurrence k is kernel call k, one per image or window")
    prompt = chat_prompt(local.processor, 1, "What is in the picture?")
    with stock.trace(prompt, images=IMAGES) as tracer:
        native_features = stock.model.source.inputs_embeds_masked_scatter_0.inputs[0][1].save()
        attention = getattr(stock.model.language_model.layers[0].self_attn.source, kernel)
        native_probabilities = attention.source.nn_functional_softmax_0.output.save()
        tracer.stop()
    with local.trace(prompt, images=IMAGES) as tracer:
        expected_features = local.vision.image_features.save()
        expected_probabilities = local.layers[0].self_attn.attention_probabilities.save()
        tracer.stop()
    assert torch.equal(native_features, expected_features)
    assert torch.equal(native_probabilities, expected_probabilities)


def test_a_location_takes_the_labels_of_the_forward_at_hand():
    """A release that numbers a call otherwise (the kernel call one higher on transformers 5.0): the served label
    becomes nnsight's there, in what follows it too; a module's own values are left as they are."""
    labels = {"attention_interface_1": "attention_interface_2"}
    drilled = "model.layers.0.self_attn.source.attention_interface_1.source.nn_functional_softmax_0.output"
    assert backends.relabelled(drilled, labels) == (
        "model.layers.0.self_attn.source.attention_interface_2.source.nn_functional_softmax_0.output")
    assert backends.relabelled("model.layers.0.self_attn.source.attention_interface_1.input", labels) == (
        "model.layers.0.self_attn.source.attention_interface_2.input")
    assert backends.relabelled("model.layers.0.self_attn.output", labels) == "model.layers.0.self_attn.output"
