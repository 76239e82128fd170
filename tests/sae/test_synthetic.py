"""interplab's SAE trainer against SAELens's own `train_toy_sae` on synthetic activations with known features
(sae_lens.synthetic): same data, budget and initial weights must give the same ground-truth MCC / F1 (within 3 %),
for every architecture; and training must actually move MCC above the untrained SAE's, so the comparison is not
between two no-ops."""
import pytest
import torch

from interplab.sae import ARCHITECTURES
from interplab.sae.synthetic import SyntheticConfig, compare_with_saelens, synthetic_data, synthetic_metrics

CFG = SyntheticConfig(steps=300, batch=128, eval_samples=4000)
pytestmark = pytest.mark.slow  # ~60 s: ten small SAE trainings (JumpReLU needs ~300 steps to move MCC at all)


@pytest.fixture(scope="module")
def comparison():
    torch.set_num_threads(1)
    return compare_with_saelens(CFG, seeds=(0,))


def test_every_architecture_matches_saelens_on_ground_truth(comparison):
    r = comparison.ratios()
    assert set(r.architecture) == set(ARCHITECTURES)
    assert ((r.mcc_ratio - 1).abs() <= 0.03).all(), r
    assert ((r.f1_ratio - 1).abs() <= 0.03).all(), r


def test_training_moves_mcc_above_the_untrained_sae(comparison):
    from interplab.sae.synthetic import _train_cfg  # noqa: PLC2701 (same package's helper, test only)
    from interplab.sae import build_training_sae

    fd, gen = synthetic_data(CFG)
    t = comparison.table
    for a in ARCHITECTURES:
        init = build_training_sae(_train_cfg(CFG, a, 0), CFG.hidden_dim)
        m0 = synthetic_metrics(init, fd, gen, 2000, seed=1)["mcc"]
        trained = t[(t.architecture == a) & (t.trainer == "interplab")].mcc.iloc[0]
        assert trained > m0 + 0.1, (a, m0, trained)


def test_result_round_trip(comparison, tmp_path):
    from interplab.core.result import Result

    back = Result.load_any(comparison.save(tmp_path / "syn"))
    assert back.table.shape == comparison.table.shape and back.config == comparison.config
