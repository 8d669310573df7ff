"""What crosses to a sandbox is what the judge drew: values, shapes and (dense) strides."""

from __future__ import annotations

import torch

from kernelarena.evaluate.arena import CHUNK_BYTES, Arena, open_chunk, view_layout


def test_shared_copies_keep_values_and_dense_strides() -> None:
    arena = Arena(torch.device("cpu"))
    try:
        permuted = torch.randn(2, 3, 5).permute(2, 0, 1)  # a layout a solution may rely on
        transposed = torch.randn(4, 7).t()
        expanded = torch.randn(5).expand(3, 5)  # overlapping: shared as a contiguous copy
        empty = torch.empty(0, 3)
        values = [permuted, transposed, expanded, empty]
        shared, layout = arena.share(values)
        for copy, value in zip(shared, values, strict=True):
            assert torch.equal(copy, value)
        assert shared[0].stride() == permuted.stride()
        assert shared[1].stride() == transposed.stride()
        assert shared[2].stride() == (5, 1)
        # The sandbox's side sees the same memory: a write there is a write here.
        chunk = layout[0]
        assert isinstance(chunk, int)
        mapped = view_layout({chunk: open_chunk(arena.handle(chunk))}, layout)
        mapped[1].fill_(3.0)
        assert bool((shared[1] == 3.0).all())
        assert torch.equal(mapped[0], permuted)
    finally:
        arena.close()


def test_sets_reuse_the_arena_after_a_rewind_and_large_sets_get_their_own_buffer() -> None:
    arena = Arena(torch.device("cpu"))
    try:
        mark = arena.mark()
        first, _ = arena.share([torch.randn(100)])
        arena.rewind(mark)
        second, _ = arena.share([torch.randn(100)])
        assert first[0].data_ptr() == second[0].data_ptr()
        big = torch.zeros(CHUNK_BYTES["cpu"] // 4 + 1)
        _, layout = arena.share([big])
        assert not isinstance(layout[0], int)  # its own buffer, not a chunk kept for later
    finally:
        arena.close()


def test_sets_larger_than_a_chunk_never_share_memory() -> None:
    """Two sets past a chunk's size, and a chunk made after them, each get memory of their own
    (issue 37: two large sets once shared one file, and an honest rmsnorm at batch 65536 failed
    "input 'hidden_states' was modified")."""
    arena = Arena(torch.device("cpu"))
    try:
        elements = CHUNK_BYTES["cpu"] // 4 + 1
        first_values = torch.full((elements,), 1.0)
        second_values = torch.full((elements,), 2.0)
        first, _ = arena.share([first_values])
        second, _ = arena.share([second_values])
        small, _ = arena.share([torch.full((100,), 3.0)])
        assert torch.equal(first[0], first_values)
        assert torch.equal(second[0], second_values)
        assert bool((small[0] == 3.0).all())
        second[0].fill_(4.0)
        small[0].fill_(5.0)
        assert torch.equal(first[0], first_values)
    finally:
        arena.close()
