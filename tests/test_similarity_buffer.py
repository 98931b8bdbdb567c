import pytest
import torch

from harness.probes.similarity_buffer import SimilarityBuffer


def test_every_product_in_the_buffer_is_the_plain_product():
    g = torch.Generator().manual_seed(0)
    buffer = SimilarityBuffer(7, 11)
    for rows, cols in ((7, 11), (3, 11), (7, 4), (1, 1)):
        q, b = torch.randn(rows, 5, generator=g), torch.randn(cols, 5, generator=g)
        sims = buffer.mm(q, b)
        assert sims.shape == (rows, cols)
        assert torch.equal(sims, torch.mm(q, b.T))
    # every product lands at the start of the same storage: a view lives until the next call
    assert buffer.mm(torch.ones(1, 5), torch.ones(1, 5)).data_ptr() == sims.data_ptr()


@pytest.mark.parametrize("rows, cols", [(8, 11), (7, 12)])
def test_a_block_larger_than_the_buffer_is_refused(rows, cols):
    with pytest.raises(ValueError, match="does not fit"):
        SimilarityBuffer(7, 11).mm(torch.ones(rows, 3), torch.ones(cols, 3))
