from interplab import figures as F


def task(scores, out_dir):
    fig = F.layer_head(scores, title="Induction score of every head", zlabel="score")
    F.export(fig, out_dir / "scores.html")
    F.export(fig, out_dir / "scores.png")
    return fig
