"""`posattn inspect`: what positions do inside a trained model, as the two papers draw it.

- `terms`: TUPE Eq. 6, the four word/position terms of layer 1 of an input-additive model
  (TUPE Figure 2) or of BERT-Ad (its positions projected apart), each with how structured it is;
- `positional`: the content-free positional logits of every bias method (TUPE Figure 4);
- `heads`: attention distance, entropy and a pattern class per head on real text (TUPE Figure 6);
- `rank`: singular-value spectra and numerical rank of the logits (DIET Theorem 1, Figs. 2, 8).

Every number comes from the model's own modules (`Encoder.layer_inputs`, the encoding's
`layer_terms`, `MultiHeadAttention.logits`); nothing is recomputed from copied formulas.
"""

from .loading import InspectedModel, load_for_inspection
from .run import InspectSettings, inspect_model

__all__ = ["InspectSettings", "InspectedModel", "inspect_model", "load_for_inspection"]
