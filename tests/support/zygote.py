"""A pre-imported `advisor` that forks one child per command line, for the tests that run the CLI.

Each `python -m advisor.cli` in a test paid the interpreter's start and the advisor's imports
(0.5 to 1.5 CPU-seconds; the bad-input tests run a few hundred of them on two cores). The zygote
imports them once; each command then runs in a forked child exactly as `python -m advisor.cli`
runs it: `advisor.cli.__main__` from the top, with the test's argv, environment, working folder,
stdin from /dev/null and stdout/stderr to files, so its exit code, its one-line errors and its
signal handling are the entry point's own.

What differs from a fresh interpreter, and why it does not matter to these tests: modules are
already imported (settings are read per call, not at import: `advisor.settings.get_settings`
is cached only in the child), and rich's consoles read COLUMNS when the zygote imported them, so
the zygote starts with the same COLUMNS=200 that `run_cli` gives every command. Tests that need a
fresh interpreter (import timing, an environment read at import) use `subprocess` themselves.

Protocol, one JSON line each way on the zygote's own pipes: {argv, env, cwd, stdout, stderr} ->
{"pid": N}, then {"code": C} when the child has ended (C as subprocess gives it: -N for a signal).
"""

from __future__ import annotations

import json
import os
import sys

# Every module of ours, and what the commands import where they are used (kept out of `advisor
# --help`'s start-up): loaded here once (1.4 s), so that no forked child pays for them.
PACKAGES = ("advisor", "probes")
LIBRARIES = ("pandas", "scipy.stats")


def _preload() -> None:
    import importlib
    import pkgutil

    for name in PACKAGES:
        package = importlib.import_module(name)
        for m in pkgutil.walk_packages(package.__path__, f"{name}."):
            if not m.name.endswith("__main__"):
                importlib.import_module(m.name)
    for name in LIBRARIES:
        importlib.import_module(name)


def _child(req: dict, proto: tuple[int, int]) -> None:
    for fd in proto:
        os.close(fd)
    code = 3
    try:
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err = os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for src, dst in ((null, 0), (out, 1), (err, 2)):
            os.dup2(src, dst)
            os.close(src)
        sys.argv = [os.path.join(req["cwd"], "advisor", "cli", "__main__.py"), *req["argv"]]
        import runpy

        runpy.run_module("advisor.cli", run_name="__main__", alter_sys=True)  # main() ends with os._exit
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001  (the child must never return into the zygote's loop)
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve() -> None:
    # The protocol moves off fds 0 and 1, which the children take over for the command.
    proto_in, proto_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    _preload()
    reader, writer = os.fdopen(proto_in, "r"), os.fdopen(proto_out, "w", buffering=1)
    writer.write(json.dumps({"ready": True}) + "\n")
    for line in reader:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(req, (proto_in, proto_out))
        writer.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        writer.write(json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n")


if __name__ == "__main__":
    serve()
