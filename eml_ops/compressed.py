"""Compressed weights for inference: :class:`CompressedLayer` and :func:`compress_weights`.

A compressed layer stores its weight in ``torch.int8`` (symmetric, one float32 scale per
output channel) or in ``torch.bfloat16`` / ``torch.float16``; bias and activations stay
float32. It runs ``eml::compressed_linear`` (``torch.ops.eml.compressed_linear``)::

    int8:   y = (x @ float(q).T) * scales + bias,  y[i, j] = scales[j] sum_k x[i, k] q[j, k] + b[j]
    16-bit: y = x @ float(w16).T + bias           (no scales)

No ``from __future__ import annotations`` here: TorchScript reads these annotations at run time.
"""

import torch
from torch import nn
from torch.nn.utils import parametrize
from torch.utils.flop_counter import register_flop_formula

from .layer import Layer, _convert_modules

#: The weight dtypes a :class:`CompressedLayer` stores.
COMPRESSED_DTYPES = (torch.int8, torch.bfloat16, torch.float16)

# int8 quantisation as torchao's Int8WeightOnlyConfig does it (symmetric, zero point 0):
# scale = amax / 127.5 (at least float32's eps), q = clamp(round(w * (1 / scale)), -128, 127).
_INT8_MIN, _INT8_MAX = -128, 127
_INT8_HALF_RANGE = (_INT8_MAX - _INT8_MIN) / 2
_SCALE_EPS = torch.finfo(torch.float32).eps


def _describe(name: str | None) -> str:
    return f"layer '{name}'" if name else "the layer"


def quantize_int8(
    weight: torch.Tensor, name: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise a float ``[out, in]`` weight to int8 with one float32 scale per output row.

    Symmetric (zero point 0), bit for bit as torchao's ``Int8WeightOnlyConfig``: ``scale =
    amax / 127.5`` per row (``float32`` eps for an all-zero row, whose values all quantise to
    0), ``q = clamp(round(w * (1 / scale)), -128, 127)``, rounding to nearest (half to even),
    in float32. (Multiplying by the reciprocal, as torchao does, differs from ``w / scale``
    only where a value lies within an ulp of a tie.)

    Raises:
        ValueError: the weight holds NaN or infinity (no int8 value stands for them); the
            message names ``name``.
    """
    weight = weight.detach().to(torch.float32)
    if not bool(torch.isfinite(weight).all()):
        raise ValueError(
            f"eml_ops.compress_weights: {_describe(name)} has NaN or infinite values in its "
            f"weight of shape {list(weight.shape)}: int8 cannot represent them"
        )
    amax = weight.abs().amax(dim=1) if weight.shape[1] > 0 else weight.new_zeros(weight.shape[0])
    scales = (amax / _INT8_HALF_RANGE).clamp(min=_SCALE_EPS)
    q = torch.round(weight * (1.0 / scales).unsqueeze(1)).clamp(_INT8_MIN, _INT8_MAX)
    q = q.to(torch.int8)
    return q.contiguous(), scales.contiguous()


def _compressed_weight(
    weight: torch.Tensor, dtype: torch.dtype, name: str | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Return the stored weight (and int8's scales) for a float weight."""
    if dtype == torch.int8:
        return quantize_int8(weight, name)
    weight = weight.detach()
    rounded = weight.to(dtype).contiguous()  # round to nearest even
    overflowed = torch.isinf(rounded) & torch.isfinite(weight)
    if bool(overflowed.any()):
        raise ValueError(
            f"eml_ops.compress_weights: {_describe(name)} has weight values beyond {dtype}'s "
            f"range (largest magnitude {weight.abs().max().item():g})"
        )
    return rounded, None


class CompressedLayer(nn.Linear):
    """A linear layer for inference whose weight is stored compressed; see the module doc.

    Design:

    * A subclass of :class:`torch.nn.Linear` (``in_features``, ``out_features``, ``weight``,
      ``bias``), so that tools which find linear layers by ``isinstance`` see one: PEFT wraps
      it in a LoRA layer (the adapters train, the base stays frozen).
    * ``weight`` (int8, bfloat16 or float16, ``[out, in]``, contiguous) and ``scales`` (int8
      only, float32 ``[out]``; ``None`` otherwise) are **buffers**, not parameters: they are
      frozen by construction (no ``requires_grad``, never in ``parameters()``, so optimisers,
      ``requires_grad_()``, DDP's gradient reduction and FSDP's sharding leave them alone),
      yet they are in ``state_dict``, follow ``.to(device)`` and are saved and loaded.
      ``bias`` stays a float32 :class:`~torch.nn.Parameter`, as in ``nn.Linear``.
    * Gradients flow to the input (and the bias), not to the weight: LoRA on a compressed
      base works; ``torch.func`` transforms do not (the autograd kernel is a C++ Function).
    * int8: symmetric per output channel, as torchao's ``Int8WeightOnlyConfig``
      (``quantize_int8``); the scale multiplies the float32 sum (an epilogue), so the
      layer computes ``(x @ q.T) * scales + b``. 16-bit: the weight rounded to nearest even.
    * Activations are float32 only: other input dtypes raise (``model.half()`` casts the
      float buffers and bias and then fails at the first call).

    Args:
        in_features: size of each input row.
        out_features: size of each output row.
        bias: whether the layer has a bias (float32).
        dtype: storage dtype of the weight: ``torch.int8``, ``torch.bfloat16`` or
            ``torch.float16``.
        device: device of the buffers and the bias.
    """

    scales: torch.Tensor | None

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        dtype: torch.dtype = torch.int8,
        device: torch.device | str | None = None,
    ) -> None:
        if dtype not in COMPRESSED_DTYPES:
            raise ValueError(
                f"eml_ops.CompressedLayer: dtype must be one of torch.int8, torch.bfloat16, "
                f"torch.float16, got {dtype}"
            )
        nn.Module.__init__(self)  # not nn.Linear's: it would allocate a float weight
        self.in_features = in_features
        self.out_features = out_features
        self.register_buffer(
            "weight", torch.zeros(out_features, in_features, dtype=dtype, device=device)
        )
        scales = torch.ones(out_features, device=device) if dtype == torch.int8 else None
        self.register_buffer("scales", scales)
        if bias:
            self.bias = nn.Parameter(torch.zeros(out_features, device=device))
        else:
            self.register_parameter("bias", None)

    def reset_parameters(self) -> None:
        """Refused: compressed weights come from a float layer (see :meth:`from_linear`)."""
        raise NotImplementedError(
            "eml_ops.CompressedLayer: compressed weights are not initialised at random; "
            "build the layer with CompressedLayer.from_linear or compress_weights"
        )

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """Apply the layer to float32 ``input`` of shape ``[*, in_features]``."""
        return torch.ops.eml.compressed_linear(input, self.weight, self.scales, self.bias)

    def extra_repr(self) -> str:
        """Sizes, bias and the weight's storage dtype."""
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, weight_dtype={self.weight.dtype}"
        )

    @torch.jit.unused
    def dequantized_weight(self) -> torch.Tensor:
        """Return the weight the layer computes with, float32 ``[out, in]``, scales applied."""
        weight = self.weight.to(torch.float32)
        return weight * self.scales.unsqueeze(1) if self.scales is not None else weight

    @classmethod
    def from_linear(
        cls, layer: nn.Linear, dtype: torch.dtype = torch.int8, name: str | None = None
    ) -> "CompressedLayer":
        """Build a compressed copy of ``layer`` (an ``nn.Linear`` or :class:`Layer`).

        The effective weight is taken (a pruned or parametrized layer's masked or computed
        weight), compressed to ``dtype``; the bias is copied to float32 with the layer's
        ``requires_grad``. Hooks and parametrizations are not carried over.

        Raises:
            ValueError: ``dtype`` is not a compressed dtype; int8 of a weight with NaN or
                infinity, or float16 of one beyond its range (the message names ``name``).
            TypeError: ``layer`` is not an ``nn.Linear``.
        """
        if not isinstance(layer, nn.Linear) or isinstance(layer, CompressedLayer):
            raise TypeError(
                f"eml_ops.CompressedLayer.from_linear: {_describe(name)} is a "
                f"{type(layer).__name__}, not an nn.Linear"
            )
        weight = layer.weight
        compressed = cls(
            layer.in_features, layer.out_features, bias=layer.bias is not None, dtype=dtype,
            device="meta",
        )
        stored, scales = _compressed_weight(weight, dtype, name)
        compressed.weight = stored
        compressed.scales = scales
        if layer.bias is not None:
            compressed.bias = nn.Parameter(
                layer.bias.detach().to(torch.float32).clone(),
                requires_grad=layer.bias.requires_grad,
            )
        compressed.train(layer.training)
        return compressed


def _is_convertible(module: nn.Module) -> bool:
    return parametrize.type_before_parametrizations(module) in (nn.Linear, Layer)


def compress_weights(module: nn.Module, dtype: torch.dtype = torch.int8) -> nn.Module:
    """Swap every ``nn.Linear`` and :class:`Layer` in ``module`` for a :class:`CompressedLayer`.

    The weights are compressed to ``dtype`` (``torch.int8``, ``torch.bfloat16`` or
    ``torch.float16``; see :class:`CompressedLayer` for the design), biases kept in float32.
    Subclasses of ``nn.Linear`` other than :class:`Layer` are left alone (they may override
    ``forward``), as are layers already compressed.

    Returns:
        The model, converted in place; a new CompressedLayer if ``module`` itself is a linear
        layer (as :func:`replace_linear`).

    Raises:
        ValueError: ``dtype`` is not a compressed dtype; a weight cannot be compressed (NaN or
            infinity for int8, beyond float16's range); the message names the layer.
    """
    if dtype not in COMPRESSED_DTYPES:
        raise ValueError(
            f"eml_ops.compress_weights: dtype must be one of torch.int8, torch.bfloat16, "
            f"torch.float16, got {dtype}"
        )
    def compressed(layer: nn.Module, path: str) -> nn.Module | None:
        if not _is_convertible(layer):
            return None  # look inside
        return CompressedLayer.from_linear(layer, dtype, name=path or None)

    return _convert_modules(module, compressed)


@register_flop_formula(torch.ops.eml.compressed_linear)
def _compressed_linear_flops(
    input_shape: torch.Size, weight_shape: torch.Size, *_: object, **__: object
) -> int:
    """Count ``eml::compressed_linear``'s FLOPs for FlopCounterMode.

    ``2 * rows * out * in``, as for ``aten::mm`` (the scales and bias not counted, as addmm's).
    """
    rows = 1
    for size in input_shape[:-1]:
        rows *= size
    return 2 * rows * weight_shape[0] * weight_shape[1]
