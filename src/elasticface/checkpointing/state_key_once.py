"""A checkpoint callback's state key built once, not at every hook Lightning dispatches to it."""

from __future__ import annotations

from typing import Any


class StateKeyOnce:
    """Mixin before ModelCheckpoint. Lightning labels each hook it dispatches with the callback's `state_key`
    (`f"[Callback]{callback.state_key}.{hook}"`, with no profiler too), and a ModelCheckpoint's key is a repr of
    its settings: about 10 us, six hooks a step. Kept until any attribute is set, so it always equals the key
    `fresh_state_key` builds (Lightning's, unless a subclass names its own)."""

    def __setattr__(self, name: str, value: Any) -> None:
        self.__dict__.pop("_state_key_once", None)
        super().__setattr__(name, value)

    def fresh_state_key(self) -> str:
        return super().state_key  # type: ignore[misc]

    @property
    def state_key(self) -> str:
        key = self.__dict__.get("_state_key_once")
        if key is None:
            key = self.__dict__["_state_key_once"] = self.fresh_state_key()
        return key
