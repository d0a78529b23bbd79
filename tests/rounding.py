"""How far a value computed inside one batch may be from the same value computed inside another.

A row of a matrix product is not computed alike in every product it can sit in.
BLAS kernels split the rows into blocks, and on some CPUs the order in which a
row's products are summed depends on how many rows the product has and where
the row sits: MKL's AVX2 kernels, which every AVX2-only Intel machine runs, do
so for products as small as the tiny checkpoints' (``MKL_ENABLE_INSTRUCTIONS=AVX2``
shows it on any Intel CPU). So an image's tower rows computed beside another
invoke's images, a prompt's logits computed in a padded batch, or two equal
rows of one product, agree with the same rows computed alone only up to float
rounding, on some machines. InstructBLIP's image features show it first: its
Q-Former reads the instruction beside the queries, a batch pads the instruction
to the longest prompt's, and the query rows then sit in products of another row
count from their first linear layer on.

The suite asserts bit-exactness where the work is the same on every CPU by
construction: the same product of the same shape (a value read twice, or
recomputed from its inputs as the forward computed it), gathers, masks, the
scatter, per-row elementwise work. Where a comparison crosses batch shapes it
uses `assert_batch_close`. CONTRIBUTING.md says how to run the suite as other
CPUs would.
"""

from __future__ import annotations

import torch

#: The absolute difference allowed between two computations of a row in products of different shapes (float32,
#: values of order one): a few units in the last place, summed over two tiny blocks and a text model.
BATCH_ROUNDING = 1e-5


def assert_batch_close(got: torch.Tensor, expected: torch.Tensor, tolerance: float = BATCH_ROUNDING) -> None:
    """``got`` equals ``expected`` up to ``tolerance`` (NaNs where both have them), in the same shape: a value
    computed inside a batch of another shape than the one ``expected`` was computed in."""
    assert got.shape == expected.shape, f"{tuple(got.shape)} != {tuple(expected.shape)}"
    torch.testing.assert_close(got, expected, atol=tolerance, rtol=0, equal_nan=True)
