"""Results: atomic file writes (`io`) and run directories (`runs`)."""
from interplab.core.io import (
    read_arrays,
    read_json,
    read_table,
    write_arrays,
    write_bytes,
    write_json,
    write_table,
    write_text,
)
from interplab.results.runs import (
    LoadedRun,
    RunDir,
    config_to_dict,
    environment_info,
    interplab_home,
    list_runs,
    load_run,
    new_run,
    runs_root,
)

__all__ = [
    "LoadedRun",
    "RunDir",
    "config_to_dict",
    "environment_info",
    "interplab_home",
    "list_runs",
    "load_run",
    "new_run",
    "runs_root",
    "read_arrays",
    "read_json",
    "read_table",
    "write_arrays",
    "write_bytes",
    "write_json",
    "write_table",
    "write_text",
]
