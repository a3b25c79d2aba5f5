"""Which epoch each pass over a ``voxlake.torch.Dataset`` reads, agreed by every copy of it.

A ``DataLoader`` iterates copies of the dataset in its workers: forked or pickled at each
``iter()``, or kept for the whole run (``persistent_workers``). None of them is the object the
training script holds, and none tells the others when a pass starts. So the copies share a few
words of memory (a ``multiprocessing.RawArray``, inherited by forked and spawned workers alike):

- the claim: the token of the latest pass, whether it took the latest setting, that setting's
  generation and the pass's epoch, in one word changed by compare-and-swap. The first copy of a
  pass to start claims it; the others of the same pass (same token) read its epoch.
- the setting: what ``set_epoch`` or ``load_state_dict`` in the main process said the next
  pass reads (an epoch, and a state as JSON), with a generation that a claim takes once.

A pass that takes no setting reads the epoch after the latest pass's. All copies of a pass
have the same token: the workers of one ``DataLoader`` iterator share its base seed, and a
persistent worker counts its own passes, as each of its fellows does.

- the versions: the table versions the copies read where nothing else fixes them (a one-rank
  job's workers under a plain ``DataLoader``), resolved by the first copy to need them and read
  by the others, for every later pass too, as one process keeps the version it opened.
"""

from __future__ import annotations

import ctypes
import json
import multiprocessing
import secrets
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import ConfigError
from ._voxlake import _compare_exchange

#: Bytes of a state a setting can carry (a state is well under 1 KiB).
STATE_BYTES = 16384

#: Tables whose versions the copies agree on (a mixture's sources); more are resolved by each
#: copy alone.
MAX_VERSIONS = 256

_CLAIM, _SET_GEN, _SET_EPOCH, _SET_STATE_LEN, _VERSIONS = range(5)
_HEADER_WORDS = 5
_VERSIONS_AT = _HEADER_WORDS + STATE_BYTES // 8
# The versions word's phases.
_NONE, _RESOLVING, _AGREED, _FAILED = range(4)
_EPOCH_BITS = 24
_GEN_BITS = 7
_TOKEN_BITS = 32


def _pack(token: int, fresh: bool, gen: int, epoch: int) -> int:
    word = (token << (1 + _GEN_BITS + _EPOCH_BITS)) | (int(fresh) << (_GEN_BITS + _EPOCH_BITS))
    word |= (gen << _EPOCH_BITS) | epoch
    # As a signed int64 (the word's type).
    return word - (1 << 64) if word >= 1 << 63 else word


def _unpack(word: int) -> Tuple[int, bool, int, int]:
    word &= (1 << 64) - 1
    epoch = word & ((1 << _EPOCH_BITS) - 1)
    gen = (word >> _EPOCH_BITS) & ((1 << _GEN_BITS) - 1)
    fresh = bool((word >> (_GEN_BITS + _EPOCH_BITS)) & 1)
    token = word >> (1 + _GEN_BITS + _EPOCH_BITS)
    return token, fresh, gen, epoch


def pass_token(*parts: int) -> int:
    """A pass's token from what all its copies know alike (never 0, which no pass has)."""
    digest = hash(parts) & ((1 << _TOKEN_BITS) - 1)
    return digest or 1


def random_token() -> int:
    """A token for a pass only this process runs."""
    return secrets.randbits(_TOKEN_BITS) or 1


class Passes:
    """The shared words of one dataset and its copies (see the module)."""

    def __init__(self, start_epoch: int) -> None:
        self._words = multiprocessing.RawArray(ctypes.c_int64, _VERSIONS_AT + 1 + MAX_VERSIONS)
        self._check_epoch(start_epoch)
        self._words[_SET_EPOCH] = start_epoch
        self._words[_SET_GEN] = 1

    @staticmethod
    def _check_epoch(epoch: int) -> None:
        if not 0 <= epoch < 1 << _EPOCH_BITS:
            raise ConfigError(f"epoch {epoch}: epochs of a Dataset are counted from 0 up to {(1 << _EPOCH_BITS) - 1}")

    def set(self, epoch: int, state: Optional[Dict[str, Any]] = None) -> None:
        """The next pass reads ``epoch`` (from ``state`` where given); main process only."""
        self._check_epoch(epoch)
        data = b"" if state is None else json.dumps(state).encode()
        if len(data) > STATE_BYTES:
            raise ConfigError(f"a state of {len(data)} bytes: a Dataset takes states of up to {STATE_BYTES}")
        ctypes.memmove(ctypes.addressof(self._words) + 8 * _HEADER_WORDS, data, len(data))
        self._words[_SET_STATE_LEN] = len(data)
        self._words[_SET_EPOCH] = epoch
        # Last: a claim that sees the new generation sees the setting whole.
        self._words[_SET_GEN] = self._words[_SET_GEN] + 1

    def pending(self) -> Optional[Tuple[int, Dict[str, Any]]]:
        """The epoch and state the next pass will take, if a setting with a state is not
        taken yet."""
        _, _, gen, _ = _unpack(self._words[_CLAIM])
        state = self._state()
        if gen == self._words[_SET_GEN] % (1 << _GEN_BITS) or state is None:
            return None
        return int(self._words[_SET_EPOCH]), state

    def _state(self) -> Optional[Dict[str, Any]]:
        n = self._words[_SET_STATE_LEN]
        if n == 0:
            return None
        data = ctypes.string_at(ctypes.addressof(self._words) + 8 * _HEADER_WORDS, n)
        state: Dict[str, Any] = json.loads(data)
        return state

    def claim(self, token: int, epochs_per_pass: int, epoch: Optional[int] = None) -> Tuple[int, Optional[Dict[str, Any]]]:
        """The epoch of the pass ``token`` and the state it starts from, if any: claimed for it
        by its first copy, read by the others. ``epoch`` (a state a worker was given) stands
        in for the setting."""
        address = ctypes.addressof(self._words) + 8 * _CLAIM
        while True:
            word = self._words[_CLAIM]
            last, fresh, gen, last_epoch = _unpack(word)
            if last == token:
                return last_epoch, self._state() if fresh else None
            set_gen = self._words[_SET_GEN] % (1 << _GEN_BITS)
            if epoch is not None:  # a worker's own state: it stands in for any setting
                new = _pack(token, False, set_gen, epoch)
            elif set_gen != gen:
                new = _pack(token, True, set_gen, self._words[_SET_EPOCH])
            elif last == 0:  # no pass yet and the constructor's setting taken: cannot be
                new = _pack(token, False, gen, last_epoch)
            else:
                following = last_epoch + max(epochs_per_pass, 1)
                self._check_epoch(following)
                new = _pack(token, False, gen, following)
            if _compare_exchange(address, word, new) == word:
                _, took, _, claimed = _unpack(new)
                return claimed, self._state() if took else None

    def versions(self, resolve: Callable[[], List[int]]) -> Optional[List[int]]:
        """The versions every copy reads: ``resolve()``'s in the first copy to ask, which the
        others wait for (a copy that fails to resolve raises, and the next to ask tries in its
        turn); None where they are more than ``MAX_VERSIONS``."""
        address = ctypes.addressof(self._words) + 8 * _VERSIONS
        while True:
            phase = self._words[_VERSIONS]
            if phase == _AGREED:
                n = self._words[_VERSIONS_AT]
                return [int(v) for v in self._words[_VERSIONS_AT + 1:_VERSIONS_AT + 1 + n]]
            if phase == _RESOLVING:
                # Another copy reads the log; a copy that dies while it does takes the
                # DataLoader down with it, and this one with them.
                time.sleep(0.005)
                continue
            if _compare_exchange(address, phase, _RESOLVING) != phase:
                continue
            try:
                found = resolve()
            except BaseException:
                self._words[_VERSIONS] = _FAILED
                raise
            if len(found) > MAX_VERSIONS:
                self._words[_VERSIONS] = _FAILED
                return None
            for i, v in enumerate(found):
                self._words[_VERSIONS_AT + 1 + i] = v
            self._words[_VERSIONS_AT] = len(found)
            # Last: a copy that sees the phase sees the versions whole.
            self._words[_VERSIONS] = _AGREED
            return found

    def last_epoch(self) -> Optional[int]:
        """The epoch of the latest pass claimed, if any."""
        token, _, _, epoch = _unpack(self._words[_CLAIM])
        return epoch if token else None

    def __getstate__(self) -> Dict[str, Any]:
        # A worker being spawned shares the words; anything else (pickle.dumps) gets a copy
        # of them, which goes on alone.
        from multiprocessing import context

        if context.get_spawning_popen() is not None:
            return {"shared": self._words}
        return {"copy": bytes(memoryview(self._words).cast("B"))}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        if "shared" in state:
            self._words = state["shared"]
            return
        data: bytes = state["copy"]
        self._words = multiprocessing.RawArray(ctypes.c_int64, len(data) // 8)
        ctypes.memmove(ctypes.addressof(self._words), data, len(data))
