"""The mixture SPRT against reference implementations.

`ville` (installed by the `experiments` extra) is checked live: its Johari mSPRT and its
two-sided normal-mixture confidence sequence are the same formulas in other units.
`confseq` (Howard, Ramdas et al.) cannot be installed from PyPI on Python 3.11 (its sdist pins
pybind11 2.6 and needs Boost headers); the values below were computed with confseq 0.0.11 built
by hand (libboost-dev, pybind11 3.1, --no-build-isolation):
    confseq.boundaries.normal_log_mixture(s, v, v_opt=1000, alpha_opt=0.05, is_one_sided=False)
    confseq.boundaries.normal_mixture_bound(v, alpha, v_opt=1000, alpha_opt=0.05, is_one_sided=False)
In confseq's units S = θ̂ / V and v = 1 / V (information), so θ̂ = S / v and the radius is u / v.
"""

from __future__ import annotations

import numpy as np
import pytest
import ville

from ragloop.experiments import mixture_log_e, mixture_radius, tuned_rho

S = np.array([0.0, 5.0, 30.0, -60.0, 120.0])
V = np.array([10.0, 100.0, 1000.0, 5000.0, 20000.0])
CONFSEQ_LOG_MIXTURE = [
    -0.0381848526182452,
    -0.2368083348217178,
    -0.6954099121373347,
    -1.5017271759544097,
    -2.1789747213208486,
]
CONFSEQ_BOUND_05 = [28.72733015110024, 38.55054633530311, 95.98173584209047, 222.9529204473206, 471.90291799878463]
CONFSEQ_BOUND_01 = [35.53933970993346, 47.04921483294095, 113.30033473599315, 257.30911424100265, 536.1673963645037]


def test_log_mixture_matches_confseq() -> None:
    rho = tuned_rho(1000.0, 0.05)
    assert np.allclose(mixture_log_e(S / V, 1.0 / V, rho), CONFSEQ_LOG_MIXTURE, rtol=1e-12)


@pytest.mark.parametrize(("alpha", "expected"), [(0.05, CONFSEQ_BOUND_05), (0.01, CONFSEQ_BOUND_01)])
def test_boundary_matches_confseq(alpha: float, expected: list[float]) -> None:
    rho = tuned_rho(1000.0, 0.05)
    assert np.allclose(mixture_radius(1.0 / V, rho, alpha) * V, expected, rtol=1e-12)


def test_log_e_matches_ville_msprt() -> None:
    """Johari's one-stream mSPRT: θ̂ = running mean, V = σ²/t, and our ρ = 1/τ²."""
    rng = np.random.default_rng(5)
    x = rng.normal(0.03, 0.25, size=3000)
    sigma, tau = 0.25, 0.04
    ref = ville.MSPRT(theta0=0.0, sigma=sigma, tau=tau).fit(x).log_e_values_
    t = np.arange(1, x.size + 1)
    ours = mixture_log_e(np.cumsum(x) / t, sigma**2 / t, 1.0 / tau**2)
    assert np.allclose(ours, ref, rtol=1e-10, atol=1e-12)
    assert (ours > np.log(20)).any(), "the stream should reach significance (the test must bite)"


def test_radius_matches_ville_gaussian_mixture_cs() -> None:
    """ville's sum-scale mixture precision ρ corresponds to ρ/σ⁴ on the information scale."""
    rng = np.random.default_rng(6)
    x = rng.normal(0.6, 0.2, size=2000)
    sigma = 0.2
    cs = ville.GaussianMixtureCS(sigma=sigma, t_opt=500, intersect=False).fit(x)
    t = np.arange(1, x.size + 1)
    radius = mixture_radius(sigma**2 / t, cs.rho_ / sigma**4, 0.05)
    assert np.allclose(cs.upper_ - cs.estimate_, radius, rtol=1e-10)
    assert np.allclose(cs.estimate_ - cs.lower_, radius, rtol=1e-10)
