"""Three questions a researcher asks of SmolLM2-135M-Instruct, each written as a newcomer would write it with
interplab, with plain transformers + PyTorch hooks, and with nnsight (issue 49): induction heads and their
ablation, a decode-only "formal vs casual" steering vector, a layer x head heatmap exported to PNG and HTML.

Each module's `task(model, **data)` is the analysis (the model is loaded outside, so load time is its own
benchmark row); `benchmarks/bench_researcher_tasks.py` times them in one process, counts their lines and checks
that they compute the same numbers."""
