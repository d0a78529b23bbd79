"""A residual gate: the module through which a sublayer's output joins the stream, scaled per channel.

Found from the forward's shape (`TEMPLATES`, through `rewrites.found`): the
forward of a class whose name holds ``ResidualGate`` that calls
``torch.sigmoid`` twice, ``torch.sqrt`` once and ``torch.clamp`` once. Muse
Spark's ``MuseSparkResidualGate.forward`` reads so::

    w = self.gate / self.temperature
    beta = torch.sigmoid(w)                                                          # torch_sigmoid_0
    alpha = torch.sqrt(torch.clamp(torch.sigmoid(-w) * (1.0 + beta), min=self.eps))  # torch_sigmoid_1, torch_sqrt_0
    return (alpha * residual + beta * hidden_states).to(residual.dtype)

so the output of ``torch_sigmoid_0`` is the scale of the sublayer's output
(beta, ``[hidden_size]``) and the output of ``torch_sqrt_0`` the scale of the
stream entering it (alpha, ``[hidden_size]``), both computed from the gate's
parameter alone, before the one expression that scales and adds them.
"""

from .found import Template

#: The sigmoid of the gate's parameter: the scale of the sublayer's output (beta).
OUTPUT_SCALE_SITE = "torch_sigmoid_0"
#: The square root that gives the scale of the stream entering the sublayer (alpha).
RESIDUAL_SCALE_SITE = "torch_sqrt_0"

TEMPLATES = (
    Template(
        "residual-gate",
        {"torch.sigmoid": (OUTPUT_SCALE_SITE, "torch_sigmoid_1"), "torch.sqrt": (RESIDUAL_SCALE_SITE,)},
        "a residual gate's per-channel scales: of the sublayer's output (beta), and of the stream entering it (alpha)",
        shape={"torch.clamp": 1},
        named="ResidualGate",
    ),
)
