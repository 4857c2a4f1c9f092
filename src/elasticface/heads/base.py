"""The head contract, in two equivalent forms.

- Dense (the oracle): ``(cos[B, C], labels[B] | None, norms[B] | None) -> logits[B, C]``.
- What the head changes (:meth:`MarginHead.plan`, used by the chunked cross-entropy of
  :mod:`elasticface.classifier`): from the target cosines ``cos θ_y [B]`` (and norms, batch
  statistics) the target logits ``z_y [B]``, plus an elementwise map of any block of non-target
  cosines ``[B, n]`` to their logits, whose per-row parameters are B-sized and detached. The
  classifier never builds ``[B, C]``; tests check both forms give the same loss and gradients.

Heads hold no class weights, so any head works with any centres layer. The base class upcasts to
fp32 with autocast disabled (float64 stays float64, for oracles and gradcheck), routes eval calls
(``labels is None``) to :meth:`eval_logits`, and resets the per-step outputs that the training step
reads: :attr:`last_margins` and :attr:`aux_loss`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .functional import GRADIENTS, GUARDS
from .plan import HeadPlan, NonTargetLSE


def check_range(
    name: str,
    value: float,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    hi_open: bool = True,
    hint: str = "",
) -> float:
    """Raise ``ValueError("name=value: must be ...")`` unless ``value`` lies in the given range."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name}={value!r}: must be a number")
    ok = math.isfinite(value)
    if lo is not None:
        ok = ok and (value > lo if lo_open else value >= lo)
    if hi is not None:
        ok = ok and (value < hi if hi_open else value <= hi)
    if not ok:
        if hi is None:
            want = f"{'>' if lo_open else '>='} {lo:g}"
        elif lo is None:
            want = f"{'<' if hi_open else '<='} {hi:g}"
        else:
            want = f"in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise ValueError(f"{name}={value}: must be {want}{hint}")
    return float(value)


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name}={value!r}: must be one of {list(choices)}")
    return value


class MarginHead(nn.Module):
    """Base class of every margin head.

    Subclasses implement :meth:`train_logits` (labels given) and may override :meth:`eval_logits`.
    Per-sample margins are stored with :meth:`_record_margins` and read lazily through
    :attr:`last_margins` so that logging, not the training step, pays for the boolean-mask sync.
    """

    needs_norms: bool = False
    normalized: bool = True
    centers_per_class: int = 1

    def __init__(self, s: float | None = None) -> None:
        super().__init__()
        self.s = check_range("s", s, 0.0, None, lo_open=True) if s is not None else None
        self._margins: Tensor | None = None
        self._valid: Tensor | None = None
        self.aux_loss: Tensor | None = None

    @property
    def last_margins(self) -> Tensor | None:
        """Detached per-sample margins applied in the last training forward (valid rows only)."""
        if self._margins is None:
            return None
        return self._margins[self._valid] if self._valid is not None else self._margins

    @property
    def step_margins(self) -> tuple[Tensor, Tensor | None] | None:
        """``(margins [N], valid [N] | None)`` of the last training forward, unmasked (no host sync)."""
        return None if self._margins is None else (self._margins, self._valid)

    def __getstate__(self) -> dict:
        # the per-step outputs may hold autograd graphs, which deepcopy and pickle refuse
        state = self.__dict__.copy()
        for key in ("_margins", "_valid", "aux_loss"):
            if key in state:
                state[key] = None
        return state

    def _record_margins(self, margins: Tensor, valid: Tensor) -> None:
        self._margins = margins.detach()
        self._valid = valid

    def forward(self, cos: Tensor, labels: Tensor | None = None, norms: Tensor | None = None) -> Tensor:
        with torch.autocast(device_type=cos.device.type, enabled=False):
            if cos.dtype != torch.float64:
                cos = cos.float()
            self._margins = None
            self._valid = None
            self.aux_loss = None
            if labels is None:
                return self.eval_logits(cos)
            if cos.dim() != 2 or labels.shape != cos.shape[:1]:
                raise ValueError(
                    f"{type(self).__name__}: cos must be [B, C] and labels [B], got {tuple(cos.shape)} "
                    f"and {tuple(labels.shape)}"
                )
            if norms is not None:
                norms = norms.to(cos.dtype).reshape(-1)
            elif self.needs_norms:
                raise ValueError(f"{type(self).__name__} needs the embedding norms: pass norms=[B]")
            return self.train_logits(cos, labels.long(), norms)

    def eval_logits(self, cos: Tensor) -> Tensor:
        return cos * self.s

    def train_logits(self, cos: Tensor, labels: Tensor, norms: Tensor | None) -> Tensor:
        raise NotImplementedError

    #: whether :meth:`plan` exists; a head without one is run densely by the classifier (its docstring says why)
    chunkable: bool = True
    #: whether ``model.classifier.path=auto`` takes the chunked form once the classes fill more than one chunk:
    #: True where the chunked step met the time goal (<= 1.05x the dense step), i.e. the fast path (non-target
    #: logits ``s * cos``); heads whose chunked form runs autograd per chunk or a second pass are dense by
    #: default and chunked on request (``path=chunked``, for the memory). Measured: docs/class_layer.md.
    chunked_by_default: bool = True

    def plan(self, cos_y: Tensor, valid: Tensor, norms: Tensor | None = None, *, num_columns: int,
             nontarget_lse: NonTargetLSE | None = None) -> HeadPlan:
        """The head on one training batch, given each row's target cosine ``cos_y [B]`` and ``valid [B]``
        (rows with a label), with the same side effects (margins drawn, buffers updated) as a dense call.

        ``num_columns``: the number of class columns the dense call would see (all shards, sampled).
        """
        with torch.autocast(device_type=cos_y.device.type, enabled=False):
            if cos_y.dtype != torch.float64:
                cos_y = cos_y.float()
            self._margins = None
            self._valid = None
            self.aux_loss = None
            if norms is not None:
                norms = norms.to(cos_y.dtype).reshape(-1)
            elif self.needs_norms:
                raise ValueError(f"{type(self).__name__} needs the embedding norms: pass norms=[B]")
            return self.train_plan(cos_y, valid, norms, num_columns, nontarget_lse)

    def train_plan(self, cos_y: Tensor, valid: Tensor, norms: Tensor | None, num_columns: int,
                   nontarget_lse: NonTargetLSE | None) -> HeadPlan:
        raise NotImplementedError(f"{type(self).__name__} has no chunked form")

    def extra_repr(self) -> str:
        return f"s={self.s}" if self.s is not None else ""


class GuardedHead(MarginHead):
    """A head whose margin goes through :func:`margin_target`: validates ``guard`` and ``gradient``."""

    def __init__(self, s: float, guard: str, gradient: str) -> None:
        super().__init__(s)
        self.guard = check_choice("guard", guard, GUARDS)
        self.gradient = check_choice("gradient", gradient, GRADIENTS)
