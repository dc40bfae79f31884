"""The C++ random machinery ggml-opt relies on, bit for bit: ``std::mt19937`` and
libstdc++'s ``std::shuffle`` / ``uniform_int_distribution`` / ``normal_distribution<float>``.

ggml-opt keeps one ``std::mt19937`` per optimizer context (default-constructed, so seeded
with 5489) and shuffles dataset shards with ``std::shuffle``. The standard leaves the
shuffle algorithm to the library; this is libstdc++'s (GCC >= 11: two swap positions per
draw when the range allows it, Lemire's nearly-divisionless downscaling), the library
ggml-python and the golden corpus were built with. The permutations were checked against
ggml-python's ``ggml_opt_dataset_shuffle`` (``tests/runtime/test_opt_dataset.py``).

    >>> from vizalloc.runtime.opt.rng import MT19937, shuffle
    >>> rng = MT19937()
    >>> rng.next_u32()            # the C++ standard's check value is the 10000th output
    3499211612
    >>> perm = list(range(6)); shuffle(perm, rng); sorted(perm) == list(range(6))
    True
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Callable, MutableSequence, TypeVar

import numpy as np

T = TypeVar("T")

_N = 624
_M = 397
_MATRIX_A = 0x9908B0DF
_UPPER = 0x80000000
_LOWER = 0x7FFFFFFF
_MASK32 = 0xFFFFFFFF

#: ``std::mt19937::default_seed``.
DEFAULT_SEED = 5489


class MT19937:
    """``std::mt19937``: 32-bit Mersenne Twister seeded the way the C++ standard seeds it."""

    def __init__(self, seed: int = DEFAULT_SEED) -> None:
        self.seed(seed)

    def seed(self, seed: int = DEFAULT_SEED) -> None:
        mt = [0] * _N
        mt[0] = seed & _MASK32
        for i in range(1, _N):
            mt[i] = (1812433253 * (mt[i - 1] ^ (mt[i - 1] >> 30)) + i) & _MASK32
        self._mt = mt
        self._index = _N

    def _twist(self) -> None:
        mt = self._mt
        for i in range(_N):
            y = (mt[i] & _UPPER) | (mt[(i + 1) % _N] & _LOWER)
            v = mt[(i + _M) % _N] ^ (y >> 1)
            if y & 1:
                v ^= _MATRIX_A
            mt[i] = v
        self._index = 0

    def next_u32(self) -> int:
        """One output of ``operator()`` (a value in ``[0, 2**32)``)."""
        if self._index >= _N:
            self._twist()
        y = self._mt[self._index]
        self._index += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        y ^= y >> 18
        return y & _MASK32

    def __call__(self) -> int:
        return self.next_u32()


def uniform_int(rng: MT19937, a: int, b: int) -> int:
    """``std::uniform_int_distribution<unsigned long>{a, b}(rng)`` as libstdc++ computes it.

    The generator's range is exactly 32 bits, so libstdc++ downscales with Lemire's method
    in 64-bit arithmetic (``_S_nd``); ``b - a`` must fit in 32 bits here.
    """
    urange = b - a
    if urange >= _MASK32:
        raise ValueError(f"uniform_int: range [{a}, {b}] wider than 32 bits is not modelled")
    erange = urange + 1
    product = rng.next_u32() * erange
    low = product & _MASK32
    if low < erange:
        threshold = ((-erange) & _MASK32) % erange
        while low < threshold:
            product = rng.next_u32() * erange
            low = product & _MASK32
    return a + (product >> 32)


def shuffle(seq: MutableSequence[T], rng: MT19937) -> None:
    """``std::shuffle(seq.begin(), seq.end(), rng)`` with libstdc++'s algorithm, in place."""
    n = len(seq)
    if n == 0:
        return
    urngrange = _MASK32  # mt19937::max() - min()
    if urngrange // n >= n:
        i = 1
        if n % 2 == 0:
            j = uniform_int(rng, 0, 1)
            seq[i], seq[j] = seq[j], seq[i]
            i += 1
        while i != n:
            swap_range = i + 1
            # __gen_two_uniform_ints(swap_range, swap_range + 1, g)
            x = uniform_int(rng, 0, swap_range * (swap_range + 1) - 1)
            p0, p1 = x // (swap_range + 1), x % (swap_range + 1)
            seq[i], seq[p0] = seq[p0], seq[i]
            i += 1
            seq[i], seq[p1] = seq[p1], seq[i]
            i += 1
        return
    for i in range(1, n):
        j = uniform_int(rng, 0, i)
        seq[i], seq[j] = seq[j], seq[i]


def _find_logf() -> Callable[[np.float32], np.float32]:
    """The C library's ``logf`` (what libstdc++ calls), else numpy's float32 log."""
    try:
        name = ctypes.util.find_library("m")
        fn = getattr(ctypes.CDLL(name), "logf") if name else None
    except OSError:
        fn = None
    if fn is None:
        return lambda x: np.float32(np.log(np.float32(x)))
    fn.restype = ctypes.c_float
    fn.argtypes = [ctypes.c_float]
    return lambda x: np.float32(fn(float(x)))


_logf = _find_logf()


def generate_canonical_f32(rng: MT19937) -> np.float32:
    """``std::generate_canonical<float, 24>(rng)``: one 32-bit draw scaled to [0, 1)."""
    r = np.float32(rng.next_u32()) / np.float32(4294967296.0)
    if r >= np.float32(1.0):
        r = np.nextafter(np.float32(1.0), np.float32(0.0))
    return np.float32(r)


class NormalF32:
    """``std::normal_distribution<float>{mean, stddev}``: libstdc++'s Marsaglia polar method.

    Arithmetic is float32 as in C++, with the C library's ``logf`` (found through ctypes;
    numpy's float32 log, which may differ in the last bit, where there is none). Checked
    value for value against g++ 12 / glibc for ``std::mt19937(12345)``.
    """

    def __init__(self, mean: float = 0.0, stddev: float = 1.0) -> None:
        self.mean = np.float32(mean)
        self.stddev = np.float32(stddev)
        self._saved: np.float32 | None = None

    def __call__(self, rng: MT19937) -> np.float32:
        if self._saved is not None:
            ret, self._saved = self._saved, None
        else:
            two, one = np.float32(2.0), np.float32(1.0)
            while True:
                x = two * generate_canonical_f32(rng) - one
                y = two * generate_canonical_f32(rng) - one
                r2 = x * x + y * y
                if not (r2 > one or r2 == np.float32(0.0)):
                    break
            quotient = np.float32(np.float32(np.float32(-2.0) * _logf(r2)) / r2)
            mult = np.float32(np.sqrt(quotient))  # IEEE sqrt: correctly rounded, as sqrtf
            self._saved = np.float32(x * mult)
            ret = np.float32(y * mult)
        return np.float32(ret * self.stddev + self.mean)
