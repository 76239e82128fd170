"""The app's page list: the tool pages (models, runs, lenses, atlas) declared here and every method's pages from its
`MethodSpec` (interplab.methods), in sidebar order. Home's `st.navigation`, the Home paragraphs, the Runs page's
hand-over and the app tests all read this one list, so a plugged-in method's page appears everywhere at once."""
from __future__ import annotations

from pathlib import Path

from interplab.methods import PageSpec, method_pages, page_order

__all__ = ["TOOL_PAGES", "app_pages", "page_path", "APP_DIR"]

APP_DIR = Path(__file__).resolve().parent

TOOL_PAGES: tuple[PageSpec, ...] = (
    PageSpec("pages/1_Models.py", "Models",
             "Pick a zoo organism or a local Hugging Face checkpoint, see its architecture (layers, query and "
             "key/value heads, widths, vocabulary, context, parameters), run a prompt, and read the top next tokens "
             "and the attention pattern of any layer and head.", reopens=("next-token",)),
    PageSpec("pages/9_Runs.py", "Runs",
             "Every saved run: its experiment, config, date, interplab version and figures, reopenable in its method "
             "page; `interplab runs list|show|rm|clean` from the command line. Pages also offer the runs interplab "
             "ships under results/ (marked 'shipped')."),
    PageSpec("pages/10_Patching.py", "Patching",
             "Activation patching between a clean and a corrupted prompt over layer x position and layer x head "
             "grids, attribution patching (gradient and integrated gradients) on the same grid, and the patched "
             "generation of any cell you click.", first_button="Run patching"),
    PageSpec("pages/11_Logit_Lens.py", "Logit Lens",
             "Every layer's residual stream read through the final norm and unembedding (and a trained tuned lens), "
             "with direct logit attribution per head and MLP."),
    PageSpec("pages/12_Attention.py", "Attention",
             "Every query head's attention pattern of a layer, with token hover and grouped-query (KV) groups "
             "shown."),
    PageSpec("pages/13_Direction.py", "Direction",
             "A dashboard for any direction (a token's unembedding, an SAE feature, a decode-shared basis vector, a "
             "CRH axis, a head's Truth-Score probe, an uploaded vector): where it fires, what it writes to the "
             "logits, its nearest neighbours among every direction computed for the model, and what adding it "
             "does.", first_button="Build dashboard"),
    PageSpec("pages/14_Atlas.py", "Atlas",
             "One model, every method on shared axes: Truth Scores, per-head patching and direct logit attribution "
             "on layer x head, the participation ratio next to where patching matters, SAE features against the "
             "decode-shared subspace and CRH axes, and how much the methods agree; on the validation organisms, "
             "whether it finds the planted mechanism.", first_button="Build atlas"),
)


def app_pages() -> list[PageSpec]:
    """Every page but Home, in sidebar order (the file's number prefix; unnumbered plug-in pages last)."""
    pages = list(TOOL_PAGES) + [p for _, p in method_pages()]
    return sorted(pages, key=lambda p: (page_order(p), p.file))


def page_path(page: PageSpec) -> Path:
    """The page script: relative files live under interplab/app, a plug-in's may be absolute."""
    p = Path(page.file)
    return p if p.is_absolute() else APP_DIR / p
