"""The cohort roofline's FLOP count against a hand count for the paper's ``cnn``."""

from __future__ import annotations

from torch import nn

from sheaf_fmtl.bench.roofline import cohort_roofline, gradient_flops, layer_macs
from sheaf_fmtl.models.cnn import cnn


def test_layer_macs_of_the_paper_cnn_by_hand():
    # conv3x3(1->32) on 28x28 -> 26x26; pool -> 13x13; conv3x3(32->64) -> 11x11; pool -> 5x5; fc 1600->10
    layers = layer_macs(cnn((1, 28, 28), 10), (1, 28, 28))
    assert [(m, shape) for _, m, shape in layers] == [
        (26 * 26 * 9 * 32, (676, 9, 32)),
        (11 * 11 * 288 * 64, (121, 288, 64)),
        (1600 * 10, (1, 1600, 10)),
    ]


def test_gradient_flops_skip_the_first_input_gradient():
    model = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    # forward 2*(20+12), weight grads 2*(20+12), input grad of the second layer only 2*12; per sample
    assert gradient_flops(model, (5,), batch=7) == 7 * 2 * (3 * (20 + 12) - 20)


def test_best_speedup_is_loop_time_over_flops_at_gemm_rate():
    model = nn.Sequential(nn.Linear(64, 64))
    r = cohort_roofline(model, (64,), batch=4, clients=2, loop_s=1.0)
    flops = 2 * gradient_flops(model, (64,), 4)
    assert abs(r["gradient_gflop"] - flops / 1e9) < 1e-12
    assert abs(r["best_speedup"] - r["gemm_gflops"] * 1e9 / flops) < 1e-6 * r["best_speedup"]


def test_batched_rate_is_a_positive_rate_and_its_bound_follows_from_it():
    model = nn.Sequential(nn.Linear(32, 16))
    r = cohort_roofline(model, (32,), batch=8, clients=2, loop_s=0.5, group=2)
    flops = 2 * gradient_flops(model, (32,), 8)
    assert r["bmm_gflops"] > 0
    assert abs(r["bmm_speedup"] - 0.5 * r["bmm_gflops"] * 1e9 / flops) < 1e-6 * r["bmm_speedup"]
