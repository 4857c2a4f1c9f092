"""ElasticFace (Boutros et al., arXiv 2109.09416): a fresh margin ``m_i ~ N(m, σ)`` per sample per step.

ElasticArcFace: target ``s * cos(θ_y + m_i)``; ElasticCosFace: target ``s * (cos θ_y - m_i)``.
σ = 0 gives exactly ArcFace / CosFace with the same ``m``, guard and gradient.

"+" (``plus=True``) ranks the draws against ``cos θ_y``:

- ``plus_assignment="paper"`` (default): the sample with the smallest ``cos θ_y`` gets the largest
  margin (draws sorted descending, scattered to the rows in ascending ``cos θ_y`` order).
- ``plus_assignment="official"``: the released code's ``margins_sorted_ascending[argsort_desc(cos)]``,
  a gather with the sort permutation instead of its inverse, which leaves the assignment
  uncorrelated with ``cos θ_y``. Use it only to reproduce the released models.
- ``rank_scope="global"`` ranks over the whole DDP batch (all ranks' ``cos θ_y`` and draws are
  gathered; every rank must have the same batch size) and keeps this rank's slice; without an
  initialised process group it is the same as ``"local"``.
- With class centres sharded across ranks (``model=model_parallel``) the head already sees the global
  batch: every rank draws the same margins (the stream of rank 0, as one process over the
  concatenated batch would) and "+" ranks all rows by their ``cos θ_y``, read from the rank that
  owns each class (``rank_scope`` does not matter then).

Only rows with ``labels >= 0`` take part; everything is O(B) and free of host syncs.

Randomness: the margin stream is a pure function of ``(seed, DDP rank, draw counter)``: each draw
seeds a CPU ``torch.Generator`` from a hash of the three. So ranks draw different margins, and the
``{seed, step}`` pair in :meth:`get_extra_state` makes a checkpoint resume continue the same stream
on every rank (also with a different number of ranks), with no per-rank state to gather.

Defaults: guard ``thmm`` and ``exact`` gradient, the same as :class:`ArcFace`, so that σ = 0
reduces to it exactly. The released code used no guard (``guard="none"``); the two differ only for
θ_y > π - m_i, a regime training never visits at m = 0.5.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from elasticface.utils.distributed import rank_and_world
from elasticface.utils.seeding import stream_seed

from .base import GuardedHead, check_choice, check_range
from .functional import margin_plan
from .plan import HeadInputs, HeadPlan
from elasticface.utils.errors import BadValue


def rank_assign(draws: Tensor, cos_y: Tensor, valid: Tensor, mode: str = "paper") -> Tensor:
    """Assign ``draws`` to rows by the rank of ``cos_y`` among valid rows (invalid rows keep theirs).

    ``paper``: descending draws to ascending ``cos_y`` (scatter with the sort permutation).
    ``official``: ascending draws gathered with ``argsort(cos_y, descending)``, as released.
    """
    inf = float("inf")
    draws = draws.to(cos_y.dtype)
    if mode == "paper":
        order = torch.argsort(torch.where(valid, cos_y, inf), stable=True)
        m_desc = torch.sort(torch.where(valid, draws, -inf), descending=True, stable=True).values
        out = torch.empty_like(draws).scatter_(0, order, m_desc)
    elif mode == "official":
        # The released code works on the compacted valid rows: row j gets m_asc[perm[j]] with
        # perm = argsort(cos_y, descending). Reproduce it without compacting (no host sync).
        perm_full = torch.argsort(torch.where(valid, cos_y, -inf), descending=True, stable=True)
        m_asc = torch.sort(torch.where(valid, draws, inf), stable=True).values
        cpos = (torch.cumsum(valid.long(), 0) - 1).clamp(min=0)  # compacted position of each row
        out = m_asc[cpos[perm_full[cpos]]]
    else:
        raise BadValue(f"plus_assignment={mode!r}: must be one of ['paper', 'official']")
    return torch.where(valid, out, draws)


class _ElasticBase(GuardedHead):
    """Shared sampling and '+' assignment; subclasses say where the margin goes (m2 or m3)."""

    _m_hi: float = math.pi / 2

    def __init__(
        self,
        *,
        s: float,
        m: float,
        sigma: float,
        plus: bool,
        plus_assignment: str,
        rank_scope: str,
        truncate: float | str | None,
        seed: int | None,
        guard: str,
        gradient: str,
    ) -> None:
        super().__init__(s, guard, gradient)
        self.m = check_range("m", m, 0.0, self._m_hi)
        self.sigma = check_range("sigma", sigma, 0.0)
        self.plus = bool(plus)
        self.plus_assignment = check_choice("plus_assignment", plus_assignment, ("paper", "official"))
        self.rank_scope = check_choice("rank_scope", rank_scope, ("local", "global"))
        if truncate is not None and truncate != "nonneg":
            check_range("truncate", truncate, 0.0, None, lo_open=True, hint=" (in units of sigma), 'nonneg' or null")
        self.truncate = truncate
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise BadValue(f"seed={seed!r}: must be an integer or null")
        self.seed = seed
        self.step = 0

    # ---- randomness -----------------------------------------------------------------------------
    def get_extra_state(self) -> dict[str, Any]:
        return {"seed": self.seed, "step": self.step}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.seed = state.get("seed", self.seed)
        self.step = int(state.get("step", 0))

    def sample_margins(self, n: int, device: torch.device | str | None = None, *, sharded: bool = False) -> Tensor:
        """Draw ``n`` margins from N(m, σ) (truncated if asked) for this rank's next step.

        ``sharded``: the rows are the global batch of sharded class centres: every rank draws rank 0's stream.
        """
        if self.seed is None:
            self.seed = torch.initial_seed()
        rank = 0 if sharded else rank_and_world()[0]
        gen = torch.Generator().manual_seed(stream_seed(self.seed, rank, self.step))
        self.step += 1
        if self.sigma == 0.0:
            draws = torch.full((n,), self.m)
        elif self.truncate is None:
            draws = torch.normal(self.m, self.sigma, (n,), generator=gen)
        elif self.truncate == "nonneg":
            draws = torch.normal(self.m, self.sigma, (n,), generator=gen).clamp_min(0.0)
        else:
            # inverse-CDF sampling of N(m, σ) truncated to m ± t·σ: exact, one uniform per draw
            t = float(self.truncate)
            lo, hi = 0.5 * (1 + math.erf(-t / math.sqrt(2))), 0.5 * (1 + math.erf(t / math.sqrt(2)))
            u = lo + (hi - lo) * torch.rand(n, generator=gen, dtype=torch.float64)
            z = math.sqrt(2.0) * torch.erfinv(2.0 * u - 1.0)
            draws = (self.m + self.sigma * z).clamp(self.m - t * self.sigma, self.m + t * self.sigma).float()
        return (
            draws.to(device, non_blocking=True) if device is not None else draws
        )  # a blocking copy waits for the device

    def assign(self, draws: Tensor, cos_y: Tensor, valid: Tensor, sharded: bool = False) -> Tensor:
        """Apply the '+' rule (if enabled) locally or over the global DDP batch.

        ``sharded``: ``cos_y`` and ``valid`` already hold every row of the global batch (sharded class
        centres), so nothing is gathered.
        """
        if not self.plus:
            return draws
        key = cos_y.detach()
        rank, world = rank_and_world()
        if self.rank_scope == "global" and world > 1 and not sharded:
            b = key.numel()
            packed = torch.stack([key, draws.to(key.dtype), valid.to(key.dtype)])
            parts = [torch.empty_like(packed) for _ in range(world)]
            dist.all_gather(parts, packed.contiguous())
            allp = torch.cat(parts, dim=1)
            out = rank_assign(allp[1], allp[0], allp[2] > 0.5, self.plus_assignment)
            return out[rank * b : (rank + 1) * b]
        return rank_assign(draws, key, valid, self.plus_assignment)

    def train_plan(self, batch: HeadInputs) -> HeadPlan:
        sharded = batch.shard is not None
        draws = self.sample_margins(batch.cos_y.numel(), batch.cos_y.device, sharded=sharded)
        if self.sigma == 0.0:  # exactly the fixed-margin head: the same float arithmetic as ArcFace / CosFace
            margins: float | Tensor = self.m
        else:
            draws = margins = self.assign(draws, batch.cos_y, batch.valid, sharded).to(batch.cos_y.dtype)
        where = {self._margin_slot: margins}
        return margin_plan(batch.cos_y, self.s, guard=self.guard, gradient=self.gradient, margins=draws, **where)

    def extra_repr(self) -> str:
        return (
            f"s={self.s}, m={self.m}, sigma={self.sigma}, plus={self.plus}, "
            f"plus_assignment={self.plus_assignment}, rank_scope={self.rank_scope}, "
            f"truncate={self.truncate}, guard={self.guard}, gradient={self.gradient}"
        )


class ElasticArcFace(_ElasticBase):
    """ElasticFace-Arc(+): ``s * cos(θ_y + m_i)``, m_i ~ N(m, σ). Paper: m = 0.5, σ = 0.05 (+: 0.0175)."""

    _margin_slot = "m2"

    @property
    def angular_margin(self) -> float:  # type: ignore[override]
        return self.m


class ElasticCosFace(_ElasticBase):
    """ElasticFace-Cos(+): ``s * (cos θ_y - m_i)``, m_i ~ N(m, σ). Paper: m = 0.35, σ = 0.05 (+: 0.025)."""

    _m_hi = 2.0
    _margin_slot = "m3"
