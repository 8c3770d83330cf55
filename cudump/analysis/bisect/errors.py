"""cudump bisect's exit statuses and errors."""

from __future__ import annotations

from cudump.errors import CudumpError

# Exit statuses: 0 no divergence, 1 divergence found (and shown), 2 trouble, 3 not reproduced.
NO_DIVERGENCE, DIVERGED_STATUS, NOT_REPRODUCED = 0, 1, 3


class BisectError(CudumpError):
    """cudump bisect could not get to an answer (exit status 2)."""


class NotReproduced(BisectError):
    """The snapshot re-runs did not show the divergence the digest runs found."""

    exit_code = NOT_REPRODUCED
