import numpy as np
import pandas as pd

from interplab.figures.crh import (
    baseline_curves, cylinder_scene, cylinder_stats_figure, helix_figure, pairwise_scatter, penalty_heatmaps,
    sector_polar, synthetic_recovery_figure,
)
from interplab.probes.crh import BaselineCurves, fit_helix, pairwise_test, planted_helix
from interplab.probes.crh import planted_cylinder, synthetic_penalty_map, synthetic_sector_map


def test_figures_build():
    org = planted_cylinder(seed=0, n_test=4)
    sm, cyl = synthetic_sector_map(org, n_bins=8, strengths=np.linspace(0.5, 6, 5))
    fig = cylinder_scene(cyl, sector_auc=sm.population_auc, sample_diff=org.test[0], ps=[0, 0.5, 1.0])
    assert len(fig.layout.sliders[0].steps) == 3
    assert sum(t.type == "mesh3d" for t in fig.data) == 8
    fig = sector_polar(sm)
    assert len(fig.layout.updatemenus[0].buttons) == 1 + 4
    pm = synthetic_penalty_map(org, ps=np.linspace(0, 1, 5), strengths=np.linspace(0.5, 6, 6))
    assert len(penalty_heatmaps(pm).data) == 2
    pt = pairwise_test(org.train[:30], np.arange(1, 31), n_perm=20)
    assert pairwise_scatter(pt).data[0].x.size == pt.x.size
    bc = BaselineCurves(methods=["a", "b"], labels=np.random.default_rng(0).integers(1, 4, (2, 5, 3)),
                        strengths=np.array([1.0, 2.0, 3.0]), directions=np.eye(2, 4))
    assert len(baseline_curves(bc).data) == 8
    df = pd.DataFrame({"concept": ["x", "x", "y", "y"], "layer": [1, 2, 1, 2], "cylinder_score": [1.0, 2, 3, 4]})
    assert cylinder_stats_figure(df).data[0].z.shape == (2, 2)
    assert len(helix_figure(fit_helix(planted_helix(30, 1.0))).data) == 2
    rec = pd.DataFrame({"axis_deg": [1.0, 2.0], "centre_deg": [3.0, 4.0]})
    assert len(synthetic_recovery_figure(rec).data) == 2
    from interplab.figures.crh import trig_law_figure
    from interplab.probes.crh import trig_law_scan

    c = np.linspace(0.1, 0.9, 20)
    tl = trig_law_scan(np.sqrt(1 - c**2), c, np.sin(c) + 0.1 * np.cos(7 * c), 2.0, a_max=2.0, a_step=0.5, n_perm=5)
    assert len(trig_law_figure(tl).data) == 2
    # HTML export works offline
    from interplab.figures.export import to_html

    assert "plotly" in to_html(fig).lower()
