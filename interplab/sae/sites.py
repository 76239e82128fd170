"""Where an SAE reads: interplab site <-> SAELens hook-name mapping, an SAE's site from its metadata, and loading an
SAE from a directory or passing an SAE object through. Defined with the SAE edits in `interplab.interventions.sae`
(edits live in interventions/, and they need these); re-exported here for the SAE method."""
from interplab.interventions.sae import hook_name_to_site, load_sae, sae_exclude_massive, sae_site, site_to_hook_name

__all__ = ["site_to_hook_name", "hook_name_to_site", "sae_site", "load_sae", "sae_exclude_massive"]
