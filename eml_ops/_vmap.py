"""Batching rules of the ``eml::`` operators for :func:`torch.vmap`.

Without them, vmap runs an op once per sample (PyTorch's slow fallback). The rules keep the
work on our GEMM:

* only the input is batched: the batch dimension is one more row dimension, one call;
* the weight is batched and the input is not: the batch is folded into ``out_features``
  (weights ``[B * out, in]``), one call;
* input and weight both batched (e.g. per-sample weight gradients): one call per sample;
* only the bias is batched: one call without bias, then the per-sample biases are added.

``linear_backward`` is taken apart into its three products, each batched as a ``linear``:
``dX = linear(G, W^T)``, ``dW = linear(G^T, X^T)``, ``db`` = column sums of ``G``.

Before computing, each rule runs the op's own argument checks on meta tensors of the
per-sample shapes, so bad input gets the same message as without vmap. The rules are
registered with :func:`torch.library.register_vmap` (a Python kernel at the
``FuncTorchBatched`` key) when :mod:`eml_ops` is imported.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

OPS = torch.ops.eml
LinearOp = Callable[[Tensor, Tensor, Tensor | None], Tensor]
Batched = tuple[Tensor, int | None]


def _per_sample_stand_in(tensor: Tensor | None, bdim: int | None) -> Tensor | None:
    """Give a meta tensor of the shape and dtype of one sample of ``tensor``."""
    if tensor is None:
        return None
    shape = list(tensor.shape)
    if bdim is not None:
        del shape[bdim]
    return torch.empty(shape, dtype=tensor.dtype, device="meta")


def _check_per_sample(op: Callable[..., Any], batched: Sequence[Batched | tuple[None, None]],
                      *rest: Any) -> None:
    """Run ``op``'s argument checks on meta stand-ins of one sample (raises as ``op`` does)."""
    op(*(_per_sample_stand_in(tensor, bdim) for tensor, bdim in batched), *rest)


def _to_front(tensor: Tensor, bdim: int) -> Tensor:
    return tensor.movedim(bdim, 0)


def _bias_per_sample(bias: Tensor | None, bdim: int | None, batch_size: int, out: int
                     ) -> Tensor | None:
    """Lay the per-sample biases out one after another: ``[B * out]``."""
    if bias is None:
        return None
    if bdim is None:
        return bias.expand(batch_size, out).reshape(batch_size * out)
    return _to_front(bias, bdim).reshape(batch_size * out)


def _fold_batch_into_out_features(op: LinearOp, batch_size: int, x: Tensor, w: Tensor,
                                  w_bdim: int, b: Tensor | None, b_bdim: int | None
                                  ) -> Batched:
    """Unbatched input, batched weight: one GEMM against weights ``[B * out, in]``."""
    w = _to_front(w, w_bdim)
    out, in_features = w.shape[1], w.shape[2]
    y = op(x, w.reshape(batch_size * out, in_features),
           _bias_per_sample(b, b_bdim, batch_size, out))
    return y.reshape(*y.shape[:-1], batch_size, out), y.dim() - 1


def _fold_batch_into_rows(op: LinearOp, x: Tensor, x_bdim: int, w: Tensor,
                          b: Tensor | None, b_bdim: int | None) -> Batched:
    """Batched input, unbatched weight: the batch is one more row dimension, one GEMM."""
    if x_bdim == x.dim() - 1:  # the batch must not sit in the feature dimension
        x, x_bdim = _to_front(x, x_bdim), 0
    if b_bdim is None:
        return op(x, w, b), x_bdim
    y = _to_front(op(x, w, None), x_bdim)
    return y + _broadcastable(y, _to_front(b, b_bdim)), 0


def _broadcastable(y: Tensor, bias: Tensor) -> Tensor:
    """``bias`` ``[B, out]`` viewed so that it broadcasts against ``y`` ``[B, *, out]``."""
    return bias.reshape(bias.shape[0], *([1] * (y.dim() - 2)), bias.shape[-1])


def _one_call_per_sample(op: LinearOp, batch_size: int, x: Tensor, x_bdim: int, w: Tensor,
                         w_bdim: int, b: Tensor | None, b_bdim: int | None) -> Batched:
    """Input and weight both batched: a different GEMM per sample."""
    x, w = _to_front(x, x_bdim), _to_front(w, w_bdim)
    if b is not None and b_bdim is not None:
        b = _to_front(b, b_bdim)
    outputs = [op(x[i], w[i], b if b is None or b_bdim is None else b[i])
               for i in range(batch_size)]
    if not outputs:  # vmap over an empty batch
        return x.new_empty((0, *x.shape[1:-1], w.shape[1])), 0
    return torch.stack(outputs), 0


def batched_linear(op: LinearOp, batch_size: int, x: Tensor, x_bdim: int | None, w: Tensor,
                   w_bdim: int | None, b: Tensor | None = None, b_bdim: int | None = None
                   ) -> Batched:
    """``op(x, w, b)`` per sample, for ``linear``-like ``op``; returns (result, its batch dim)."""
    if x_bdim is not None and w_bdim is not None:
        return _one_call_per_sample(op, batch_size, x, x_bdim, w, w_bdim, b, b_bdim)
    if w_bdim is not None:
        return _fold_batch_into_out_features(op, batch_size, x, w, w_bdim, b, b_bdim)
    if x_bdim is not None:
        return _fold_batch_into_rows(op, x, x_bdim, w, b, b_bdim)
    if b_bdim is not None:
        y = op(x, w, None).unsqueeze(0)
        return y + _broadcastable(y, _to_front(b, b_bdim)), 0
    return op(x, w, b), None


def _matrix_transposed(tensor: Tensor, bdim: int | None) -> Batched:
    """Per sample ``as_matrix(tensor).t()``: ``[*, n]`` as ``[n, rows]``."""
    if bdim is None:
        return tensor.reshape(math.prod(tensor.shape[:-1]), tensor.shape[-1]).t(), None
    tensor = _to_front(tensor, bdim)
    rows = math.prod(tensor.shape[1:-1])
    return tensor.reshape(tensor.shape[0], rows, tensor.shape[-1]).transpose(1, 2), 0


def _weight_transposed(weight: Tensor, bdim: int | None) -> Batched:
    """Per sample ``weight.t()``."""
    if bdim is None:
        return weight.t(), None
    return _to_front(weight, bdim).transpose(1, 2), 0


def _column_sums(tensor: Tensor, bdim: int | None) -> Batched:
    """Per sample, the sums over all rows of ``[*, n]``: ``[n]``."""
    if bdim is None:
        return tensor.reshape(math.prod(tensor.shape[:-1]), tensor.shape[-1]).sum(0), None
    tensor = _to_front(tensor, bdim)
    rows = math.prod(tensor.shape[1:-1])
    return tensor.reshape(tensor.shape[0], rows, tensor.shape[-1]).sum(1), 0


def _linear_rule(op: LinearOp, name: str) -> Callable[..., tuple[Tensor, int | None]]:
    def rule(info: Any, in_dims: tuple[int | None, ...], input: Tensor, weight: Tensor,
             bias: Tensor | None = None) -> tuple[Tensor, int | None]:
        x_bdim, w_bdim = in_dims[0], in_dims[1]
        b_bdim = in_dims[2] if len(in_dims) > 2 else None
        _check_per_sample(op, [(input, x_bdim), (weight, w_bdim), (bias, b_bdim)])
        return batched_linear(op, info.batch_size, input, x_bdim, weight, w_bdim, bias, b_bdim)

    rule.__name__ = rule.__qualname__ = f"{name}_vmap"
    rule.__doc__ = f"Batching rule of eml::{name}."
    return rule


def linear_backward_vmap(info: Any, in_dims: tuple[int | None, ...], grad_output: Tensor,
                         input: Tensor, weight: Tensor, output_mask: Sequence[bool]
                         ) -> tuple[tuple[Tensor | None, ...], tuple[int | None, ...]]:
    """Batching rule of eml::linear_backward: its three products, each batched as a linear."""
    g_bdim, x_bdim, w_bdim = in_dims[0], in_dims[1], in_dims[2]
    _check_per_sample(OPS.linear_backward,
                      [(grad_output, g_bdim), (input, x_bdim), (weight, w_bdim)], output_mask)
    batch_size = info.batch_size
    grads: list[Tensor | None] = [None, None, None]
    bdims: list[int | None] = [None, None, None]
    if output_mask[0]:  # dX = G · W = linear(G, W^T)
        grads[0], bdims[0] = batched_linear(OPS.linear, batch_size, grad_output, g_bdim,
                                            *_weight_transposed(weight, w_bdim))
    if output_mask[1]:  # dW = G^T · X = linear(G^T, X^T) over all rows
        grads[1], bdims[1] = batched_linear(OPS.linear, batch_size,
                                            *_matrix_transposed(grad_output, g_bdim),
                                            *_matrix_transposed(input, x_bdim))
    if output_mask[2]:  # db = column sums of G
        grads[2], bdims[2] = _column_sums(grad_output, g_bdim)
    return tuple(grads), tuple(bdims)


linear_vmap = _linear_rule(OPS.linear, "linear")
linear_forward_vmap = _linear_rule(OPS.linear_forward, "linear_forward")


def register_vmap_rules() -> None:
    """Register the rules with torch.library (called once by ``import eml_ops``)."""
    torch.library.register_vmap("eml::linear", linear_vmap)
    torch.library.register_vmap("eml::linear_forward", linear_forward_vmap)
    torch.library.register_vmap("eml::linear_backward", linear_backward_vmap)
