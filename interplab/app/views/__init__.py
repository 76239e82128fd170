"""Method pages' views: each page's sections as named functions, one module per method page, so a
page script reads as its outline. Views call the same public API a script does (probes, results,
figures); nothing below `interplab.app` imports them."""
