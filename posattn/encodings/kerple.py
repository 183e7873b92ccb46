"""KERPLE: kernelized relative positional embedding (Chi et al., NeurIPS 2022)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..errors import require_choice
from ..tracing import traced
from .base import LayerTerms, ModelDims, Place, PositionalEncoding, empty_parameter
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
        r2_max = 2.0 if self.options.kernel == "power" else None
        return self.r1.clamp(min=EPS), self.r2.clamp(min=EPS, max=r2_max)

    def kernel(self, distance: Tensor) -> Tensor:
        """-r1 log(1 + r2 d) or -r1 d^r2 of distances [..., m] per head: [..., H, m]."""
        r1, r2 = self.valid_parameters()
        r1, r2 = r1[:, None], r2[:, None]
        distance = distance.to(r1.dtype)[..., None, :]
        if self.options.kernel == "log":
            return -r1 * torch.log1p(r2 * distance)
        return -r1 * distance.pow(r2)

    def project_parameters(self) -> None:
        """The official projection: keep the stored values in range so that they keep
        receiving gradients after an update has pushed them out (in training). Written past
        autograd's version counter (`.data`): the values written are those already there
        unless an update pushed them out, so an earlier forward's saved parameters stay valid
        for its backward when a second forward runs first (a summed loss, R-drop), which an
        in-place write failed. Traced (compile, torch.func), an in-place write."""
        if not self.training:
            return
        with torch.no_grad():
            r1, r2 = self.valid_parameters()
            stored = (self.r1, self.r2) if traced() else (self.r1.data, self.r2.data)
            stored[0].copy_(r1)
            stored[1].copy_(r2)

    def layer_terms_at(self, positions, dtype):
        self.require_positions(positions)
        self.project_parameters()

        def bias(differences: Tensor) -> Tensor:  # [B, m, n] -> [B, H, m, n]
            return self.kernel(differences.abs().flatten(-2)).unflatten(-1, differences.shape[-2:])

        terms = LayerTerms.of_differences(self.content_scale(), positions, bias)
        return [terms] * self.dims.num_layers

    def layer_terms(self, seq_len, device, dtype):
        self.project_parameters()
        r1, r2 = self.valid_parameters()
        # The kernel of the 2n - 1 distinct distances, spread into [H, n, n] by `toeplitz`.
        distance = offsets(seq_len, device).abs().to(r1.dtype)
        r1, r2 = r1[:, None], r2[:, None]
        if self.options.kernel == "log":
            by_offset = -r1 * torch.log1p(r2 * distance)
        else:
            by_offset = -r1 * distance.pow(r2)
        return [LayerTerms.of_table(self.content_scale(), by_offset)] * self.dims.num_layers
