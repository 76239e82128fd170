"""A toy seventh method, plugged in from outside interplab (INTERPLAB_METHODS=tests.methods.toy_method): the mean
residual norm per layer. Everything it needs is in this folder; tests/methods/test_toy_method.py checks that it
appears in the CLI, the app's page list and Home, the data boxes, the Runs page's hand-over, the smoke runs and the
atlas without any edit to interplab."""
from pathlib import Path

from interplab.methods import DataSpec, MethodSpec, PageSpec

HERE = Path(__file__).resolve().parent

METHOD = MethodSpec(
    name="toy_method",
    title="Toy Method",
    summary="mean residual norm per layer (a plug-in example)",
    package="tests.methods.toy_method.api",
    experiment_modules=("tests.methods.toy_method.experiment",),
    experiments=("toy-method-norms",),
    figures="tests.methods.toy_method.figures",
    pages=(PageSpec(str(HERE / "toy_method_page.py"), "Toy Method",
                    "The mean residual-stream norm of every layer on a few texts (a plugged-in method).",
                    first_button="Compute norms", buttons=("toy_compute",), reopens=("toy-method-",)),),
    doc="tests/methods/toy_method/README.md",
    tests="tests/methods",
    data=DataSpec(("text",), experiment="toy-method-norms"),
    smoke={"toy-method-norms": ("model={m}", "n_texts=2")},
    atlas="tests.methods.toy_method.atlas_part:PART",
)
