"""The preference losses against hand-computed numbers."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from trainers.dpo.loss import preference_loss, segment_sums  # noqa: E402


def _t(*values: float):
    return torch.tensor(values, dtype=torch.float64)


def test_sigmoid_loss_and_rewards_by_hand():
    # pair 0: h = (-10 - -12) - (-20 - -19) = 2 - (-1) = 3; pair 1: h = 0
    out = preference_loss(_t(-10.0, -5.0), _t(-20.0, -6.0), _t(-12.0, -5.0), _t(-19.0, -6.0),
                          beta=0.5)
    expected = [math.log1p(math.exp(-1.5)), math.log(2.0)]  # -log sigmoid(0.5 * h)
    assert out.losses.tolist() == pytest.approx(expected, abs=1e-12)
    assert out.chosen_rewards.tolist() == pytest.approx([1.0, 0.0])
    assert out.rejected_rewards.tolist() == pytest.approx([-0.5, 0.0])


def test_label_smoothing_mixes_both_directions():
    out = preference_loss(_t(-1.0), _t(-3.0), _t(-2.0), _t(-2.0), beta=1.0, label_smoothing=0.2)
    h = 2.0  # (-1 - -2) - (-3 - -2)
    sig = 1 / (1 + math.exp(-h))
    assert out.losses.item() == pytest.approx(-0.8 * math.log(sig) - 0.2 * math.log(1 - sig))
    # the smoothed loss has its minimum at beta*h = log((1-eps)/eps), not at infinity
    far = preference_loss(_t(10.0), _t(-10.0), _t(0.0), _t(0.0), beta=1.0, label_smoothing=0.2)
    best = preference_loss(_t(math.log(4) / 2), _t(-math.log(4) / 2), _t(0.0), _t(0.0), beta=1.0,
                           label_smoothing=0.2)
    assert best.losses.item() < far.losses.item()


def test_ipo_regresses_the_margin_to_one_over_two_beta():
    out = preference_loss(_t(-1.0), _t(-2.0), _t(-1.5), _t(-1.5), beta=0.25, loss_type="ipo")
    assert out.losses.item() == pytest.approx((1.0 - 2.0) ** 2)  # h = 1, target 1/(2*0.25) = 2
    at_target = preference_loss(_t(1.0), _t(-1.0), _t(0.0), _t(0.0), beta=0.25, loss_type="ipo")
    assert at_target.losses.item() == 0.0


def test_gradient_pushes_chosen_up_and_rejected_down():
    chosen, rejected = _t(-4.0).requires_grad_(), _t(-4.0).requires_grad_()
    preference_loss(chosen, rejected, _t(-4.0), _t(-4.0), beta=0.1).losses.sum().backward()
    assert chosen.grad.item() == pytest.approx(-0.05)  # -beta * sigmoid(-0) = -0.05
    assert rejected.grad.item() == pytest.approx(0.05)


def test_unknown_loss_type_is_refused():
    with pytest.raises(ValueError, match="choose sigmoid or ipo"):
        preference_loss(_t(0.0), _t(0.0), _t(0.0), _t(0.0), beta=0.1, loss_type="hinge")


def test_segment_sums():
    values = torch.arange(10, dtype=torch.float32)
    assert segment_sums(values, [3, 0, 5, 2]).tolist() == [3.0, 0.0, 25.0, 17.0]
