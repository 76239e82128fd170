"""The model zoo: offline model organisms as ordinary Hugging Face checkpoints.

    from interplab.zoo import resolve, list_organisms, get_recipe, train_organism
    resolve("toy-chat")            # -> Path of the checkpoint directory (shipped or user-built)
    [r.name for r in list_organisms()]

See docs/zoo.md.
"""
from interplab.zoo.build import train_organism
from interplab.zoo.registry import BuildContext, Recipe, get_recipe, known_names, list_organisms, register
from interplab.zoo.resolve import resolve, user_zoo_dir
from interplab.zoo.saes import shipped_saes

__all__ = ["resolve", "list_organisms", "get_recipe", "known_names", "register", "Recipe", "BuildContext",
           "train_organism", "user_zoo_dir", "shipped_saes"]
