"""Stage ``tile``: a nest that transposes runs in blocks, so that what it reads stays in cache.

The pattern is a copy from NHWC to NCHW with pointwise work on the way (a convnet's activation
saved for the backward; the relu after a batch norm): its innermost loop ``v`` (the pixels) is
contiguous in the stores but strided in a load, and the loop ``u`` just outside it (the
channels) is contiguous in that load. In that order each value of ``u`` reads a line of every
pixel, so the load's whole tensor passes through the caches once per channel: a convnet's
32-channel activation of 4.7 MB was read 32 times, 0.2-0.95 ms a call as the L3 allowed.

Tiled, ``(..., u, v)`` becomes ``(..., vb, u, vi)`` over blocks of ``TILE`` pixels, and a second
nest takes the last ``v mod TILE``: a block's ``TILE x ext(u)`` elements are read from memory once
and stay in L1/L2 while ``u`` runs. Only a ``u`` of a static extent of at most ``MAX_INNER`` (a
channel count) is tiled, and only nests without reductions. Runs after ``collapse`` (it needs the
merged pixel loop) and before ``materialize``.

The mirror image, a copy from NCHW to NHWC with a few channels (a convnet's RGB input: the
innermost loop ``v`` of 3 channels, strided in the load, and ``u`` the pixels), is tiled too:
``(..., u, v)`` becomes ``(..., ub, ui, v)`` with a static ``ui`` of ``TILE``. Untiled, the parallel
loop that stage ``parallelize`` joins from the batch and the pixels paid a division and a modulo
per pixel for 3 elements, and its loop of 3 was a vector loop whose vector part never ran. With
static inner loops the C compiler vectorizes the block as interleaved stores: 33 -> 5 us in C
alone with the data in cache (2x3x96x128, 2 threads), and in ResNet-50, whose input comes from
memory, 0.68-0.87x the kernel's time at the four benchmark shapes
(``benchmarks/results/ab_tile_resnet50_amx.md``). Only a ``v`` of a static extent below
``vectorize.MIN_LANES`` is tiled so; stage ``vectorize`` leaves such a loop scalar.
"""

from __future__ import annotations

from ..ir import loop as L
from ..ir import sym as S
from ..ir.loop import Kernel, Reduce
from .nest import accesses, build_nest, coeff, is_flat, map_nests, next_loop_index, subs_store
from .vectorize import MIN_LANES

TILE = 64  # pixels a block: 4 vectors of 16
MAX_INNER = 2048  # channels: a block of TILE x 2048 floats is 512 KB, about an L2


def _reads_across(vars_, stores) -> bool:
    """Flat stores without reductions, contiguous along the innermost loop ``v``, and a load that
    reads contiguously along the loop ``u`` outside it and strided along ``v``."""
    if len(vars_) < 2 or not is_flat(stores):
        return False
    u, v = vars_[-2], vars_[-1]
    if any(coeff(s.index[0], v) != 1 or s.index[1] is not None for s in stores) or \
            any(isinstance(x, Reduce) for s in stores for x in L.walk(s.value)):
        return False
    loads, other = accesses([], [s.value for s in stores])
    if u in other or v in other:
        return False
    strided = False
    for p in loads:
        cu, cv = coeff(p, u), coeff(p, v)
        if cu is None or cv is None:
            return False
        strided |= cv not in (0, 1) and cu == 1
    return strided


def _transposes(vars_, exts, stores) -> bool:
    """``u`` the channels (a static count), ``v`` more pixels than a tile."""
    eu, ev = exts[-2:] if len(exts) > 1 else (None, None)
    if not isinstance(eu, int) or not 1 < eu <= MAX_INNER or (isinstance(ev, int) and ev <= TILE):
        return False
    return _reads_across(vars_, stores)


def _gathers_few(vars_, exts, stores) -> bool:
    """The mirror pattern: ``v`` a few channels, ``u`` more pixels than a tile, the stores
    contiguous over both."""
    eu, ev = exts[-2:] if len(exts) > 1 else (None, None)
    if not isinstance(ev, int) or not 1 < ev < MIN_LANES or (isinstance(eu, int) and eu <= TILE):
        return False
    return _reads_across(vars_, stores) and all(coeff(s.index[0], vars_[-2]) == ev for s in stores)


def _blocked(vars_, exts, stores, k: int) -> list:
    """The nest with loop ``k`` (-1 or -2) in blocks of TILE: the block loop goes outside the
    last two, the loop within a block takes ``k``'s place, and a second nest in the original
    order runs the last ``ext(k) mod TILE``."""
    w, ew = vars_[k], exts[k]
    blocks = S.floordiv(ew, TILE)
    if blocks == 0:  # the rest of a tiled nest: fewer than TILE pixels
        return build_nest(vars_, exts, stores)
    wb, wi = L.loop_var(blocks, "b"), L.loop_var(TILE, "t")
    tail, tail_ext = list(vars_[-2:]), list(exts[-2:])
    tail[k], tail_ext[k] = wi, TILE
    main = build_nest([*vars_[:-2], wb, *tail], [*exts[:-2], blocks, *tail_ext],
                      [subs_store(s, {w: S.add(S.mul(wb, TILE), wi)}) for s in stores])
    rest_ext = S.mod(ew, TILE)
    if rest_ext == 0:  # a static multiple of TILE pixels (ViT's 224x224 image)
        return main
    wt = L.loop_var(rest_ext, "t")
    rest_vars, rest_exts = list(vars_), list(exts)
    rest_vars[k], rest_exts[k] = wt, rest_ext
    rest = build_nest(rest_vars, rest_exts, [subs_store(s, {w: S.add(S.mul(blocks, TILE), wt)}) for s in stores])
    return main + rest


def tile_nest(vars_, exts, stores) -> list:
    """The nest as it is, or tiled (module docstring) when it transposes or gathers a few channels."""
    if _gathers_few(vars_, exts, stores):
        return _blocked(vars_, exts, stores, -2)
    if _transposes(vars_, exts, stores):
        return _blocked(vars_, exts, stores, -1)
    return build_nest(vars_, exts, stores)


def tile(kernel: Kernel) -> Kernel:
    """Every flat perfect nest that transposes or gathers a few channels, tiled."""
    with L.kernel_names(next_loop_index(kernel)):
        return map_nests(kernel, tile_nest)
