"""The torch releases ringrun.torch supports, checked once at import.

Tested: Debian's torch 1.13 and the PyPI wheels 2.13 and 2.14 (README, "PyTorch: coming from
Horovod"). Older than 1.13 is refused; newer than the newest tested gets one warning line.
"""

import re
import warnings

OLDEST = (1, 13)
NEWEST_TESTED = (2, 14)


def _major_minor(version):
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def check_torch_version(version):
    """ImportError below the supported range; a one-line warning above the tested one."""
    found = _major_minor(version)
    if found is None:
        return
    if found < OLDEST:
        raise ImportError(f"ringrun.torch needs torch >= {OLDEST[0]}.{OLDEST[1]}, found torch {version}; "
                          "upgrade torch (pip install 'torch>=1.13')")
    if found > NEWEST_TESTED:
        warnings.warn(f"ringrun.torch was tested up to torch {NEWEST_TESTED[0]}.{NEWEST_TESTED[1]}; "
                      f"torch {version} is newer and untested", stacklevel=3)
