"""Identity-aware batches: P identities x K images each (optional; margin heads train fine without it).

Useful for pair/triplet-style auxiliary losses, for Partial FC sampling studies, and for long-tailed
sets where plain shuffling rarely puts two images of a small identity in one batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch.distributed as dist
from torch.utils.data import Sampler

from elasticface.data.face_dataset import FaceDataset
from elasticface.utils.errors import BadValue


def _labels_of(source: FaceDataset | Sequence[int] | np.ndarray) -> np.ndarray:
    labels = np.asarray(source.labels if isinstance(source, FaceDataset) else source, dtype=np.int64)
    if labels.ndim != 1:
        raise BadValue(f"identity sampler needs a 1-D label array, got shape {labels.shape}")
    return labels


class IdentityBatchSampler(Sampler[list[int]]):
    """Batch sampler yielding lists of P*K indices: P distinct identities, K images of each.

    Every identity's images are shuffled and cut into groups of K (an identity with fewer than K, or a
    short last group, is topped up by repeating its own images); the groups are shuffled and packed
    P distinct identities at a time. An epoch holds about len(dataset) / (P*K) batches, split across
    DDP ranks by rank (all ranks draw the same permutation from `seed + epoch`; call `set_epoch`).
    Use it as `DataLoader(dataset, batch_sampler=IdentityBatchSampler(dataset, batch_size=...))`.
    """

    def __init__(
        self,
        dataset_or_labels: FaceDataset | Sequence[int] | np.ndarray,
        batch_size: int,
        images_per_identity: int = 4,
        num_replicas: int | None = None,
        rank: int | None = None,
        seed: int = 0,
    ) -> None:
        self.labels = _labels_of(dataset_or_labels)
        k = int(images_per_identity)
        if k < 1 or batch_size % k != 0:
            raise BadValue(f"batch_size={batch_size} must be a multiple of images_per_identity={k}")
        self.k, self.p = k, batch_size // k
        self.batch_size = batch_size
        if num_replicas is None:
            num_replicas = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        if rank is None:
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        if not 0 <= rank < num_replicas:
            raise BadValue(f"rank {rank} outside [0, {num_replicas})")
        self.num_replicas, self.rank = int(num_replicas), int(rank)
        self.seed, self.epoch = int(seed), 0
        order = np.argsort(self.labels, kind="stable")
        ids, starts, counts = np.unique(self.labels[order], return_index=True, return_counts=True)
        if ids.size < self.p:
            raise BadValue(f"batches of {self.p} identities x {k} images need at least {self.p} identities; "
                             f"the data has {ids.size}")
        self._members = [order[s:s + c] for s, c in zip(starts, counts)]
        self._num_groups = int(sum(-(-c // k) for c in counts))
        self._batches_per_rank = (self._num_groups // self.p) // self.num_replicas
        if self._batches_per_rank == 0:
            raise BadValue(
                f"{len(self.labels)} images make no full batch of {batch_size} on each of {self.num_replicas} ranks"
            )

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self._batches_per_rank

    def _groups(self, rng: np.random.Generator) -> list[tuple[int, np.ndarray]]:
        groups: list[tuple[int, np.ndarray]] = []
        for ident, members in enumerate(self._members):
            perm = rng.permutation(members)
            short = (-perm.size) % self.k
            if short:
                perm = np.concatenate([perm, rng.choice(members, size=short, replace=True)])
            groups.extend((ident, g) for g in perm.reshape(-1, self.k))
        order = rng.permutation(len(groups))
        return [groups[i] for i in order]

    def _pack(self, rng: np.random.Generator) -> list[np.ndarray]:
        groups = self._groups(rng)
        total = self._batches_per_rank * self.num_replicas
        batches: list[np.ndarray] = []
        pending: list[tuple[int, np.ndarray]] = []
        current: list[tuple[int, np.ndarray]] = []
        used: set[int] = set()
        it = iter(groups)
        while len(batches) < total:
            # take deferred groups first so an identity with many groups is spread over many batches
            source = None
            for j, (ident, _) in enumerate(pending):
                if ident not in used:
                    source = pending.pop(j)
                    break
            if source is None:
                nxt = next(it, None)
                if nxt is None:
                    break
                if nxt[0] in used:
                    pending.append(nxt)
                    continue
                source = nxt
            current.append(source)
            used.add(source[0])
            if len(current) == self.p:
                batches.append(np.concatenate([g for _, g in current]))
                current, used = [], set()
        while len(batches) < total:
            # leftovers cannot form P distinct identities: top up with random other identities
            while len(current) < self.p:
                ident = int(rng.integers(len(self._members)))
                if ident not in used:
                    members = self._members[ident]
                    current.append((ident, rng.choice(members, size=self.k, replace=members.size < self.k)))
                    used.add(ident)
            batches.append(np.concatenate([g for _, g in current]))
            current, used = [], set()
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        batches = self._pack(rng)
        for b in batches[self.rank :: self.num_replicas]:
            yield b.tolist()


def identity_sampler(
    dataset: FaceDataset,
    batch_size: int,
    images_per_identity: int = 4,
    seed: int = 0,
    num_replicas: int | None = None,
    rank: int | None = None,
) -> IdentityBatchSampler:
    """Factory with the DataModule's `sampler(dataset, batch_size=...)` signature (Hydra `_partial_`)."""
    return IdentityBatchSampler(dataset, batch_size, images_per_identity, num_replicas, rank, seed)


__all__ = ["IdentityBatchSampler", "identity_sampler"]
