"""KERPLE: kernelized relative positional embedding (Chi et al., NeurIPS 2022)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..errors import require_choice
from ..tracing import under_func_transform
from .base import LayerTerms, ModelDims, Place, PositionalEncoding, empty_parameter
from .projection import project_in_range
from .relative import offsets

EPS = 1e-2  # the official code's floor for both kernel parameters


@dataclass(frozen=True)
class KerpleOptions:
    kernel: str = "log"

    def __post_init__(self) -> None:
        require_choice("kernel", self.kernel, ("log", "power"))


class Kerple(PositionalEncoding):
    """[kerple] KERPLE, Chi et al. 2022, log and power kernels (KERPLE log / power), as the
    official code (chijames/KERPLE) computes them:

    log:   alpha_ij = q_i k_j^T / sqrt(d_h) - r1_h log(1 + r2_h |i - j|)
    power: alpha_ij = q_i k_j^T / sqrt(d_h) - r1_h |i - j|^{r2_h}

    r1, r2: learned per head, shared by all layers; initialised U(0, 2) (log r1, power r2)
    and U(0, 1) (the other); kept in range by projection after each update as the code does:
    both >= 0.01, the power's exponent <= 2 (a conditionally positive definite kernel).
    Bidirectional form: the kernels are functions of |i - j|, so symmetric (causal models mask
    the upper half). Any length.
    """

    name = "kerple"
    Options = KerpleOptions
    paper = "Chi et al. 2022 (KERPLE)"
    equation = "KERPLE log / power"
    places = (Place.LOGIT_BIAS,)
    cost = "once per forward, [H,n,n] from 2H scalars"

    def __init__(self, dims: ModelDims, options: KerpleOptions) -> None:
        super().__init__(dims, options)
        self.r1 = empty_parameter(dims.num_heads)
        self.r2 = empty_parameter(dims.num_heads)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """log: r1 ~ U(0, 2), r2 ~ U(0, 1); power: r1 ~ U(0, 1), r2 ~ U(0, 2)."""
        log = self.options.kernel == "log"
        wide, narrow = (self.r1, self.r2) if log else (self.r2, self.r1)
        nn.init.uniform_(wide, 0.0, 2.0)
        nn.init.uniform_(narrow, 0.0, 1.0)

    def valid_parameters(self) -> tuple[Tensor, Tensor]:
        return self.r1.clamp(min=EPS), self.r2.clamp(min=EPS, max=self.r2_max)

    @property
    def r2_max(self) -> float:
        return 2.0 if self.options.kernel == "power" else math.inf

    def parameters_read(self) -> tuple[Tensor, Tensor]:
        """r1, r2 as a forward reads them. In training, the official projection: the stored
        values are kept in range so that they keep receiving gradients after an update has
        pushed them out, written past autograd's version counter (`project_in_range`), so
        that a forward's saved tensors stay valid for its backward when a second forward
        runs first (a summed loss, R-drop), eager or compiled, which an in-place write
        failed. Under a torch.func transform, an in-place write (the parameters there are
        the transform's inputs)."""
        if not self.training:
            return self.valid_parameters()
        if under_func_transform():
            with torch.no_grad():
                r1, r2 = self.valid_parameters()
                self.r1.copy_(r1)
                self.r2.copy_(r2)
            return self.valid_parameters()
        return project_in_range(self.r1, EPS, math.inf), project_in_range(self.r2, EPS, self.r2_max)

    def kernel(self, distance: Tensor, r1: Tensor, r2: Tensor) -> Tensor:
        """-r1 log(1 + r2 d) or -r1 d^r2 of distances [..., m] per head: [..., H, m]."""
        r1, r2 = r1[:, None], r2[:, None]
        distance = distance.to(r1.dtype)[..., None, :]
        if self.options.kernel == "log":
            return -r1 * torch.log1p(r2 * distance)
        return -r1 * distance.pow(r2)

    def layer_terms_at(self, positions, dtype):
        self.require_positions(positions)
        r1, r2 = self.parameters_read()

        def bias(differences: Tensor) -> Tensor:  # [B, m, n] -> [B, H, m, n]
            distances = differences.abs().flatten(-2)
            return self.kernel(distances, r1, r2).unflatten(-1, differences.shape[-2:])

        terms = LayerTerms.of_differences(self.content_scale(), positions, bias)
        return [terms] * self.dims.num_layers

    def layer_terms(self, seq_len, device, dtype):
        r1, r2 = self.parameters_read()
        # The kernel of the 2n - 1 distinct distances, spread into [H, n, n] by `toeplitz`.
        by_offset = self.kernel(offsets(seq_len, device).abs(), r1, r2)
        return [LayerTerms.of_table(self.content_scale(), by_offset)] * self.dims.num_layers
