import plotly.graph_objects as go


def task(scores, out_dir):
    m = abs(scores).max()
    fig = go.Figure(go.Heatmap(z=scores, colorscale="RdBu_r", zmin=-m, zmax=m, zmid=0,
                               colorbar=dict(title="score")))
    fig.update_layout(title="Induction score of every head", xaxis_title="head", yaxis_title="layer",
                      template="plotly_white", width=720, height=820)
    fig.update_yaxes(autorange="reversed", dtick=1)
    fig.update_xaxes(dtick=1)
    fig.write_html(out_dir / "scores.html", include_plotlyjs=True)
    fig.write_image(out_dir / "scores.png", scale=2)
    return fig
