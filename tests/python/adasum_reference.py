"""Adasum's reference for the tests of ringrun.torch and ringrun.tensorflow (test_adasum.py in
tests/python and tests/python/tensorflow): the runtime's tree (ringrun(3), RINGRUN_ADASUM) over
flattened float64 vectors, numpy arrays or torch tensors alike (only @, * and + are used).
"""

import math

SMALLEST = math.sqrt(2.2250738585072014e-308)  # sqrt(DBL_MIN): a smaller squared norm keeps weight 1


def adasum_pair(a, b, m=1, k=1):
    """a standing for m ranks' vectors, b for k ranks' (Adasum's halves when m == k)."""
    dot, aa, bb = float(a @ b), float(a @ a), float(b @ b)
    wa = 1 - m / (m + k) * dot / aa if aa >= SMALLEST else 1.0
    wb = 1 - k / (m + k) * dot / bb if bb >= SMALLEST else 1.0
    return wa * a + wb * b


def adasum_vectors(vectors):
    """Every rank's vector combined as the runtime pairs them: ranks 2^k + j into rank j first,
    then blocks of 2, 4, .. weighted by the ranks each half stands for."""
    t = list(vectors)
    p = 1 << (len(t).bit_length() - 1)
    behind = [1] * p
    for j in range(len(t) - p):
        t[j] = adasum_pair(t[j], t[p + j])
        behind[j] = 2
    d = 1
    while d < p:
        for block in range(0, p, 2 * d):
            t[block] = adasum_pair(t[block], t[block + d], behind[block], behind[block + d])
            behind[block] += behind[block + d]
        d *= 2
    return t[0]
