"""Logit soft-capping as the wrapper applies it: ``model.logits`` and ``project_on_vocab`` squash the head's output by
the text config's ``final_logit_softcapping`` exactly where transformers' forward does (`assert_capped_as_the_wrapper`)."""

from __future__ import annotations

import torch

from envoys.testing import chat_prompt, noise_image


def assert_capped_as_the_wrapper(model, capped: bool) -> None:
    """With a cap of 0.5 set on the text config for the call (restored after): the logits are the head's output on
    the last block's, squashed (``tanh(x / cap) * cap``) when ``capped`` and as they are otherwise, and
    ``project_on_vocab`` gives the same."""
    config = model.text_config
    before = getattr(config, "final_logit_softcapping", None)
    cap = 0.5
    config.final_logit_softcapping = cap
    try:
        with model.trace(chat_prompt(model.processor, 1, "What is it?"), images=[noise_image(48, 32, seed=0)]):
            last = model.layers[-1].layer_output.save()
            logits = model.logits.save()
        with torch.no_grad():
            head = model.lm_head._module(model.norm._module(last))
        squashed = torch.tanh(head / cap) * cap
        assert not torch.equal(head, squashed)
        assert torch.equal(logits, squashed if capped else head)  # what transformers' forward does
        assert torch.equal(model.project_on_vocab(last), logits)
    finally:
        config.final_logit_softcapping = before
