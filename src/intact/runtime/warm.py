"""Warm local execution: a job's Python starts with torch, timm and ``intact`` already imported.

Snakemake still decides, starts and waits for every job; only the start of the job's Python changes. The
workflow (``onstart`` in workflow/rules/runtime.smk) starts one *warm parent* per local run, or adopts one its
environment names (``intact warm`` keeps one across runs): a process that imports the modules the job scripts
import, once, and then forks a fresh child per job. It serves only jobs that would import the same code. A
rule's ``script:`` adapter calls :func:`hand_off` first: when a warm parent serves the run (its socket in
``INTACT_WARM_SOCKET``), the adapter's process becomes a client that passes its script, argv, working
directory, environment, umask and file descriptors 0-2 to the parent, which forks a child that runs the same
script as ``python <script>`` would. The client relays every catchable signal it receives to the child and
exits exactly as the child did (same exit code, or killed by the same signal), so Snakemake sees the job's own
status; if the client dies (SIGKILL), the parent SIGKILLs the child. The child runs in a process group of its
own, so a signal reaches it once, through its client. Where no warm parent serves (SLURM, another executor, a
system other than Linux, ``INTACT_WARM=0``, another Python, a parent that is gone, a message that is not the
protocol's: :mod:`intact.runtime.protocol`) the job runs cold in its own process, as before (where a parent was
named, a line on stderr says why).
docs/design.md says more.
"""

from __future__ import annotations

import glob
import json
import os
import secrets
import signal
import socket
import subprocess
import sys

from intact.runtime import protocol

#: the warm parent's socket, set by the workflow for its jobs: a file path, or ``@name`` for a name in Linux's
#: abstract socket namespace (no file: nothing is left behind, even when everything is killed by SIGKILL)
ENV_SOCKET = "INTACT_WARM_SOCKET"
#: ``INTACT_WARM=0`` (or false/no/off): no warm parent; every job runs cold
ENV_SWITCH = "INTACT_WARM"
#: the prefixes of the environment variables read when Python starts or the parent's libraries are imported: what
#: ``import`` finds and how it starts (PYTHONPATH, PYTHONWARNINGS, ...), timm's (TIMM_FUSED_ATTN), torch's and its
#: math libraries'; a job runs warm only where they are the parent's (not ``*_NUM_THREADS``: a job sets its threads)
IMPORT_ENV = ("PYTHON", "TIMM_", "TORCH", "PYTORCH_", "CUBLAS", "CUDNN", "NVIDIA_TF32", "MKL_", "KMP_", "DNNL_",
              "ONEDNN_", "ATEN_")
#: the signals a client passes on to its job (SIGKILL and SIGSTOP cannot be caught: see the module docstring)
RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
#: what the warm parent imports besides the package modules the job scripts import: the modules of
#: Snakemake's ``script:`` preamble (named, never imported here), and torch._dynamo, which every torch.optim
#: optimizer imports when it is built (docs/speed.md)
EXTRA_PRELOAD = ("snakemake.iocontainers", "snakemake.logging", "torch._dynamo")
#: and, for a run that tracks to MLflow, MLflow itself (intact.tracking imports it only when it logs)
TRACKING_PRELOAD = ("intact.tracking.preload",)
#: how long a run waits for the answer of the parent its environment names: its imports take ~3 s on a quiet
#: machine, over 20 s on a loaded one (2 cores, load 8: torch, timm and intact in 24.8 s)
PROBE_TIMEOUT = 60
_SERVED = False  # True in a child forked by the warm parent: hand_off() then lets the script run here


def enabled(environ: dict | None = None) -> bool:
    """Whether the switch allows a warm parent (it does unless ``INTACT_WARM`` is 0, false, no or off)."""
    value = (environ if environ is not None else os.environ).get(ENV_SWITCH, "1")
    return value.lower() not in ("0", "false", "no", "off")


# ---- the client: the job's own process (its script calls hand_off first) ----------------------------------

def hand_off(path: str | None = None) -> None:
    """Run this job script in a fresh child of the warm parent at ``path`` (default: :data:`ENV_SOCKET`'s) and
    exit as it exits; return (and let the script run here, cold) where no warm parent serves this job, or in
    the child itself. Whatever goes wrong before the child runs the job (no parent, a refusal, a message that
    is not the protocol's) runs it cold, with a line on stderr saying why."""
    path = path or os.environ.get(ENV_SOCKET)
    if _SERVED or not path or not enabled():
        return
    relay = None
    try:
        sock = protocol.connect(path)
    except OSError as err:
        why = f"unavailable ({err})"
    else:
        try:
            request = {"script": os.path.abspath(sys.argv[0]), "argv": sys.argv, "cwd": os.getcwd(),
                       "env": dict(os.environ), "umask": _umask(), "python": python_id(),
                       "executable": sys.executable, **signal_state()}
            protocol.send(sock, request, [0, 1, 2])
            relay = _Relay(sock)
            answer, _ = protocol.receive(sock)
            why = _why_not_served(answer)
        except OSError as err:
            why = f"unavailable ({err})"
        except protocol.ProtocolError as err:
            why = f"a message that is not the warm protocol's: {err}"
        if not why:
            _exit_as(sock)
        sock.close()
    print(f"intact: no warm parent for this job ({why}); running it cold", file=sys.stderr, flush=True)
    if relay is not None:
        relay.undo()  # a signal that came meanwhile now reaches this process, as it would have reached it cold


def _why_not_served(answer: dict | None) -> str:
    """Why the parent's answer to a job's request does not start the job: "" where it does (``{"pid": n}``)."""
    if answer is None:
        return "it closed the connection"
    if isinstance(answer.get("refused"), str):
        return f"refused: {answer['refused']}"
    if isinstance(answer.get("pid"), int):
        return ""
    raise protocol.ProtocolError(f"an answer it does not know: {json.dumps(answer)[:200]}")


def signal_state() -> dict[str, list[int]]:
    """What a process inherits of signals across exec and a cold job would start with: the signals blocked
    (its mask) and those ignored (``SIG_IGN``, e.g. by ``nohup``). Read before hand_off installs its relays."""
    return {"blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
            "ignored": sorted(int(s) for s in catchable() if signal.getsignal(s) == signal.SIG_IGN)}


def catchable() -> set[int]:
    """The signals a process can handle or ignore (all but SIGKILL and SIGSTOP)."""
    return {int(s) for s in signal.valid_signals()} - {signal.SIGKILL, signal.SIGSTOP}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class _Relay:
    """The client's handlers of :data:`RELAYED`: each signal goes on to the job's child (``{"signal": n}``)
    and is remembered, so that :meth:`undo` can deliver it here if the job runs cold after all."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.received = sock, []
        self.before = {sig: signal.signal(sig, self.relay) for sig in RELAYED}

    def relay(self, signum: int, frame: object) -> None:
        self.received.append(signum)
        try:
            protocol.send(self.sock, {"signal": int(signum)})
        except OSError:
            pass

    def undo(self) -> None:
        """The handlers as they were before (a cold job's), then the signals received meanwhile, raised here."""
        for sig, handler in self.before.items():
            signal.signal(sig, handler)
        for sig in self.received:
            signal.raise_signal(sig)


def _exit_as(sock: socket.socket) -> None:
    """Wait for the child's status (sent by the parent once it has reaped the child) and end this process
    the same way: the same exit code, or killed by the same signal."""
    try:
        message, _ = protocol.receive(sock)
        status = message["exit"] if message is not None else None
    except (OSError, protocol.ProtocolError, KeyError) as err:
        message, status = None, f"{type(err).__name__}: {err}"
    if not isinstance(status, int):
        why = status or ("the connection closed" if message is None else f"not an exit status: {message}")
        print(f"intact: the warm parent went away while this job ran; its status is unknown ({why})",
              file=sys.stderr, flush=True)
        os._exit(1)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig in RELAYED:
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal whose default action is not to end the process
    os._exit(os.waitstatus_to_exitcode(status))


# ---- the workflow's side: start and stop the warm parent ---------------------------------------------------

class WarmParent:
    """A running warm parent; :meth:`stop` ends it (it also ends by itself when its starter exits)."""

    def __init__(self, proc: subprocess.Popen, path: str, before: str | None = None) -> None:
        self.proc, self.path = proc, path
        self.before = before  # the ENV_SOCKET this process had before: stop() gives it back

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout: float | None = 10) -> None:
        """Close the parent's stdin (it then finishes its running jobs and exits), wait, and clean up. Called
        once no job runs (the workflow's onsuccess / onerror): a parent still importing after ``timeout``
        seconds, or one that does not end, is killed."""
        if os.environ.get(ENV_SOCKET) == self.path:
            if self.before is None:
                del os.environ[ENV_SOCKET]
            else:
                os.environ[ENV_SOCKET] = self.before
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def unsupported() -> str:
    """Why this system cannot run a warm parent, or "" where it can: it takes Linux's Unix sockets of type
    ``SOCK_SEQPACKET``, their abstract names and ``SO_PEERCRED`` (macOS has none of the three)."""
    return "" if sys.platform == "linux" else f"warm parents need Linux's Unix sockets; this is {sys.platform}"


def not_started(off: str) -> str:
    """Why :func:`start` returned None: this system (:func:`unsupported`), else ``off`` where the switch is off, else
    the parent's own failure (its traceback is on stderr)."""
    return unsupported() or ("it did not start: its error is above" if enabled() else off)


def start(modules: list[str], export: bool = True, env: dict[str, str] | None = None) -> WarmParent | None:
    """Start a warm parent that preloads ``modules`` and, with ``export``, export its socket to the jobs this
    process starts (``INTACT_WARM_SOCKET``); ``env``: the parent's environment, if not this process's. Returns
    None (jobs run cold) when the switch is off, the system cannot (:func:`unsupported`) or the parent fails to
    start. Returns as soon as the parent listens; it imports the modules while the first jobs connect."""
    if not enabled() or unsupported():
        return None
    path = f"@intact-warm-{os.getpid()}-{secrets.token_hex(8)}"   # abstract: unguessable, no file to clean up
    code = "import sys; from intact.runtime.warm_server import serve; serve(sys.argv[1], sys.argv[2:])"
    # stdin stays a pipe from this process: its end-of-file (a stop, or this process gone) ends the parent
    proc = subprocess.Popen([sys.executable, "-c", code, path, *modules], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=env)
    if proc.stdout.readline().strip() != b"listening":
        proc.wait()
        WarmParent(proc, path).stop()
        return None
    proc.stdout.close()
    before = os.environ.get(ENV_SOCKET)
    if export:
        os.environ[ENV_SOCKET] = path
    return WarmParent(proc, path, before)


def start_or_adopt(modules: list[str]) -> tuple[WarmParent | None, str]:
    """The warm parent for a run's jobs and a line saying which. Where the environment already names one that
    serves this Python (:func:`probe`: one a caller keeps across runs, e.g. a test session's, or the outer run's
    for a workflow started inside a job), the run adopts it: ``(None, line)``, nothing to stop. Otherwise it
    starts its own (:func:`start`), and the line says why the named one did not serve; None where none starts
    (jobs run cold)."""
    kept, note = os.environ.get(ENV_SOCKET), ""
    if kept and enabled():
        why = probe(kept)
        if not why:
            return None, (f"intact: jobs start from the warm parent the environment names ({kept}; kept, not stopped "
                          "by this run)")
        del os.environ[ENV_SOCKET]
        note = f" (the one {ENV_SOCKET} names does not serve this run: {why})"
    parent = start(modules)
    if parent is None:
        why = not_started(off="")
        return None, (why or note) and f"intact: no warm parent{note}{f' ({why})' if why else ''}; jobs run cold"
    return parent, f"intact: jobs start from a warm parent (pid {parent.pid}; INTACT_WARM=0: cold){note}"


def probe(path: str) -> str:
    """Whether the warm parent at ``path`` would serve a job of this process: "" if so, else why not (gone,
    another user's, another Python, import path or start-up variable, code changed since it started, not the warm
    protocol).
    A parent answers once its imports are done: one just started (``intact warm``) is waited for, up to
    :data:`PROBE_TIMEOUT` seconds."""
    try:
        with protocol.connect(path, timeout=PROBE_TIMEOUT) as sock:
            protocol.send(sock, {"probe": True, "python": python_id()})
            answer, _ = protocol.receive(sock)
    except OSError as err:
        return f"unavailable ({err})"
    except protocol.ProtocolError as err:
        return f"a message that is not the warm protocol's: {err}"
    if answer is not None and answer.get("ok") is True:
        return ""
    if answer is not None and isinstance(answer.get("refused"), str):
        return f"refused: {answer['refused']}"
    return "it closed the connection" if answer is None else f"an answer it does not know: {json.dumps(answer)[:200]}"


def start_for_checkout(root: str | os.PathLike, export: bool = True) -> WarmParent | None:
    """A warm parent for the local runs of the checkout at ``root``, as its Snakefile's own run would start
    one: its job scripts' modules preloaded, under the PYTHONPATH the Snakefile gives its jobs
    (:func:`jobs_pythonpath`), which a parent must share to serve them. Kept by its caller across runs
    (``intact warm``)."""
    scripts = glob.glob(os.path.join(root, "workflow", "scripts", "*.py"))
    src = os.path.join(os.path.abspath(root), "src")
    env = {**os.environ, "PYTHONPATH": jobs_pythonpath(src, os.environ.get("PYTHONPATH"))}
    return start(preload_modules(scripts), export=export, env=env)


def jobs_pythonpath(src: str, current: str | None) -> str:
    """The PYTHONPATH a Snakefile whose package sources are in ``src`` gives its jobs: ``src`` first, added
    once (a run inside a job, whose PYTHONPATH already starts with it, keeps its jobs' path)."""
    if current and current.split(os.pathsep)[0] == src:
        return current
    return os.pathsep.join(filter(None, [src, current]))


def keep(argv: list[str]) -> int:
    """``intact warm``: start a warm parent for this checkout's local runs, print the line that hands it to
    them, and keep it until Ctrl-C (or SIGTERM). Runs from a shell where that line was pasted adopt it."""
    import argparse

    from intact.sources import SRC

    parser = argparse.ArgumentParser(prog="intact warm", description=keep.__doc__)
    parser.add_argument("--checkout", default=str(SRC.parent),
                        help="the repository whose Snakefile runs (default: %(default)s)")
    args = parser.parse_args(argv)
    parent = start_for_checkout(args.checkout, export=False)
    if parent is None:
        print(f"intact warm: no warm parent ({not_started(off=f'{ENV_SWITCH} is off')})", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop as on Ctrl-C
    print(f"export {ENV_SOCKET}={parent.path}", flush=True)
    print(f"intact warm: pid {parent.pid}; runs started where {ENV_SOCKET} is set so adopt it; Ctrl-C stops it",
          file=sys.stderr, flush=True)
    try:
        parent.proc.wait()
    except KeyboardInterrupt:
        print("intact warm: stopping once its running jobs end (Ctrl-C again: now, and they fail)", file=sys.stderr)
    try:   # killed after 10 s, it took its jobs' exit statuses with it: each job then failed, its outputs deleted
        parent.stop(timeout=None)
    except KeyboardInterrupt:
        parent.proc.kill()
        parent.proc.wait()
    return 0


# ---- the warm parent ---------------------------------------------------------------------------------------

def preload_modules(scripts: list[str], tracking: bool = True) -> list[str]:
    """What the warm parent imports: every ``intact`` module the job scripts import (read from their
    imports, intact.sources: no list kept by hand; torch and timm come with them), then :data:`EXTRA_PRELOAD`, and
    :data:`TRACKING_PRELOAD` for a run that tracks (``tracking``)."""
    from intact.sources import imported_modules  # only the workflow's process needs it, not a client

    names = sorted(set().union(*(imported_modules(s) for s in scripts)) - {"intact.runtime.warm"})
    return names + list(EXTRA_PRELOAD) + list(TRACKING_PRELOAD if tracking else ())


def python_id() -> list[str]:
    """The interpreter, environment and import settings (:data:`IMPORT_ENV`) a job's Python runs with: a job
    runs warm only where they are the parent's (a plugin on another PYTHONPATH runs cold, or in its own parent)."""
    # the binary, not its name: a venv's python and python3 (the console scripts' shebang) are one interpreter
    env = sorted(f"{k}={v}" for k, v in os.environ.items()
                 if k.startswith(IMPORT_ENV) and not k.endswith("_NUM_THREADS"))
    return [os.path.realpath(sys.executable), sys.prefix, *env]


def mark_served() -> None:
    """Called in a forked child: hand_off() lets the job's script run in this process."""
    global _SERVED
    _SERVED = True
