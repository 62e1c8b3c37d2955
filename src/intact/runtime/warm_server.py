"""The warm parent of intact.runtime.warm: imports the job scripts' modules once, then forks a fresh child per
job.

One thread, one loop over its sockets: a new client (fork a child for its job), SIGCHLD (reap, and send the
client its child's status), and stdin's end-of-file or SIGTERM (stop: accept no more jobs, wait for the
running ones, exit). The child itself reads its client's connection (a signal to pass on; end-of-file: the
client is gone, SIGKILL), so that a job never outlives its client, even if the parent dies with it. A child
starts from the parent's state right after its imports - the parent never runs a job - and is made to look
like a fresh ``python <script>`` process (see :func:`_become_job`).
"""

from __future__ import annotations

import atexit
import importlib
import io
import os
import runpy
import selectors
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback

from intact.runtime import protocol
from intact.runtime.code_state import changed_code, code_state
from intact.runtime.warm import catchable, mark_served, python_id

#: a file the warm parent appends "start <pid> <script>" and "exit <pid> <wait status>" to, per job (tests)
ENV_TRACE = "INTACT_WARM_TRACE"


def serve(path: str, modules: list[str]) -> None:
    """The warm parent's entry point (started by :func:`intact.runtime.warm.start`). Ends with ``os._exit``: the
    interpreter's own finalisation of everything imported (and the threads some of it started) could take
    long, while the workflow waits for this process."""
    Server(path).run(modules)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class Server:
    """The warm parent's state: its listening socket, its running jobs, its selector."""

    def __init__(self, path: str) -> None:
        # Ctrl-C reaches each job through its client; this process waits for them and ends with its stdin
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if sys.path and sys.path[0] == "":
            sys.path.pop(0)  # `python -c` puts the working directory first; a job's Python does not
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(protocol.address(path))
        self.listener.listen(128)
        self.wake_r, self.wake_w = socket.socketpair()
        for s in (self.wake_r, self.wake_w):
            s.setblocking(False)
        signal.set_wakeup_fd(self.wake_w.fileno())
        for sig in (signal.SIGCHLD, signal.SIGTERM):  # both only wake the loop (see _wake)
            signal.signal(sig, lambda signum, frame: None)
        self.jobs: dict[int, socket.socket] = {}  # child pid -> its client's connection
        self.code: dict[str, tuple] = {}  # what code_state() saw once the imports were done
        # as this process started, before its imports (torch._dynamo's sets TORCHINDUCTOR_CACHE_DIR)
        self.python = python_id()
        self.stopping = False
        self.sel = selectors.DefaultSelector()

    def run(self, modules: list[str]) -> None:
        print("listening", flush=True)
        os.dup2(2, 1)  # the starter reads one line only; anything later goes to stderr
        started = time.time_ns()
        for name in modules:
            importlib.import_module(name)
        self.code = code_state(since_ns=started)
        self.sel.register(self.listener, selectors.EVENT_READ, self._accept)
        self.sel.register(self.wake_r, selectors.EVENT_READ, self._wake)
        self.sel.register(0, selectors.EVENT_READ, self._stdin)
        while not (self.stopping and not self.jobs):
            for key, _ in self.sel.select():
                key.data(key.fileobj)

    def _stop(self) -> None:
        if not self.stopping:
            self.stopping = True
            for obj in (self.listener, 0):
                self.sel.unregister(obj)
            self.listener.close()

    def _stdin(self, fd: int) -> None:
        if not os.read(fd, 4096):
            self._stop()

    def _wake(self, sock: socket.socket) -> None:
        try:
            signums = sock.recv(4096)
        except BlockingIOError:
            signums = b""
        if signal.SIGTERM in signums:
            self._stop()
        self._reap()

    def _accept(self, listener: socket.socket) -> None:
        conn, _ = listener.accept()
        fds: list[int] = []
        request: dict | None = None
        try:
            if protocol.peer_uid(conn) != os.getuid():
                raise OSError("another user")
            conn.settimeout(60)  # a client sends its request at once; never wait on one for good
            request, fds = protocol.receive(conn, max_fds=3)
            conn.settimeout(None)
            why = self._refusal(request, fds)
        except OSError as err:
            why = str(err) or type(err).__name__
        except protocol.ProtocolError as err:
            why = f"not a request of the warm protocol: {err}"
        if why or request.get("probe"):  # a refusal (the job runs cold), or intact.runtime.warm.probe's answer
            for fd in fds:
                os.close(fd)
            _send(conn, {"refused": why} if why else {"ok": True})
            conn.close()
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self._child(conn, fds, request)  # never returns
        try:
            os.setpgid(pid, pid)  # also done by the child: whichever runs first
        except OSError:
            pass
        for fd in fds:
            os.close(fd)
        self.jobs[pid] = conn
        self._trace(f"start {pid} {request['script']}")
        _send(conn, {"pid": pid})  # if the client is gone, the child sees its end-of-file and ends

    def _refusal(self, request: dict | None, fds: list[int]) -> str:
        """Why this parent must not run the request's job (it then runs cold), or ""."""
        if request is None:
            return "the client closed the connection"
        malformed = _malformed(request) if not request.get("probe") else ""
        if malformed or len(fds) != (0 if request.get("probe") else 3):
            return malformed or f"{len(fds)} file descriptors passed, not the standard streams"
        if request.get("python") != self.python:   # a conda env's, a container's, a plugin's PYTHONPATH
            other = sorted(set(map(str, request.get("python") or [])) ^ set(self.python))
            return f"another Python, import path or start-up variable ({other[0].split('=')[0]})"
        changed = changed_code(self.code)
        # what this process imported is no longer what a fresh Python would import (an edit, an install)
        return f"code changed since the warm parent started: {changed}" if changed else ""

    def _trace(self, line: str) -> None:
        if os.environ.get(ENV_TRACE):
            with open(os.environ[ENV_TRACE], "a") as f:
                f.write(line + "\n")

    def _reap(self) -> None:
        while self.jobs:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.jobs.pop(pid, None)
            if conn is None:
                continue
            self._trace(f"exit {pid} {status}")
            _send(conn, {"exit": status})
            conn.close()

    def _child(self, conn: socket.socket, fds: list[int], request: dict) -> None:
        """The forked child: become the job's process, run its script, exit with its status."""
        code = 70
        try:
            for s in (self.listener, self.wake_r, self.wake_w, *self.jobs.values()):
                s.close()
            self.sel.close()
            code = _become_job(conn, fds, request)
        except KeyboardInterrupt:
            # a SIGINT before the script's first line (during the set-up: relayed as soon as the child reads its
            # client) ends the job as it ends a cold Python that has not yet run its script: killed by SIGINT
            _end_by(signal.SIGINT)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)


#: what a job's request holds (intact.runtime.warm.hand_off): each key's type, and its items' where it has items
_REQUEST = {"script": (str, None), "argv": (list, str), "cwd": (str, None), "env": (dict, str), "umask": (int, None),
            "python": (list, str), "executable": (str, None), "blocked": (list, int), "ignored": (list, int)}


def _malformed(request: dict) -> str:
    """What is wrong with a job's request ("" if nothing): a missing key, or a value of another type."""
    for key, (kind, item) in _REQUEST.items():
        value = request.get(key)
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        if not isinstance(value, kind) or (item and not all(isinstance(v, item) for v in items)):
            return f"a request whose {key!r} is not a {kind.__name__}" + (f" of {item.__name__}" if item else "")
    return ""


def _send(conn: socket.socket, message: dict) -> None:
    """Send ``message`` to a client that may be gone (then nothing is sent)."""
    try:
        protocol.send(conn, message)
    except OSError:
        pass


def _end_by(sig: int) -> None:
    """End this process killed by ``sig``, as an uncaught KeyboardInterrupt ends Python (stdio flushed)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    os.kill(os.getpid(), sig)


def _watch_client(conn: socket.socket) -> None:
    """In the job's process (a daemon thread): pass the client's relayed signals on to this process's group;
    when the client is gone (SIGKILL, or the workflow's whole process group killed), SIGKILL the group - also
    when the warm parent is gone too. This end of the connection is read here only; a record that is not a
    message of the protocol is passed over."""
    while True:
        try:
            message, _ = protocol.receive(conn)
        except protocol.ProtocolError:
            continue
        except OSError:
            message = None
        if message is None:
            os.killpg(0, signal.SIGKILL)
        sig = message.get("signal")
        if isinstance(sig, int) and sig in catchable():
            os.killpg(0, sig)


def _become_job(conn: socket.socket, fds: list[int], request: dict) -> int:
    """Make this forked process what ``python <script>`` started by the client would be, and run the script:
    the client's file descriptors 0-2, working directory, environment, umask and argv; fresh stdio objects,
    default signal handlers, Python's, NumPy's and torch's global random state reseeded (a fresh process
    seeds them from the OS), torch's thread count from the environment as at a fresh import. Returns the exit code."""
    os.setpgid(0, 0)  # signals reach the job through its client only (a terminal's Ctrl-C: once, not twice)
    mark_served()
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    # the client's inherited signal state, not the parent's: a cold job started where SIGINT is ignored or
    # blocked would not see a Ctrl-C either, and one started normally must see it whatever the parent inherited
    for sig in catchable() - {signal.SIGINT}:
        try:
            if sig in request["ignored"]:
                signal.signal(sig, signal.SIG_IGN)
            elif signal.getsignal(sig) == signal.SIG_IGN:
                signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # a signal the C library reserves for itself
    signal.signal(signal.SIGINT, signal.SIG_IGN if signal.SIGINT in request["ignored"] else signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, request["blocked"])
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.umask(request["umask"])
    sys.argv = list(request["argv"])
    sys.executable = request["executable"]  # the name the job's Python was started by (python, python3)
    sys.path.insert(0, os.path.dirname(request["script"]))
    _fresh_stdio()
    _fresh_state()
    threading.Thread(target=_watch_client, args=(conn,), name="intact-warm-client", daemon=True).start()
    return _run_script(request["script"])


def _fresh_stdio() -> None:
    """New sys.std* objects over fds 0-2, buffered as a fresh interpreter buffers them."""
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    enc, errors = sys.stdout.encoding, sys.stdout.errors

    def stream(fd: int, write: bool, line: bool, err: str) -> io.TextIOWrapper:
        raw = io.FileIO(fd, "wb" if write else "rb", closefd=False)
        buf = io.BufferedWriter(raw) if write else io.BufferedReader(raw)
        return io.TextIOWrapper(buf, encoding=enc, errors=err, line_buffering=line, write_through=unbuffered and write)

    sys.stdin = sys.__stdin__ = stream(0, False, False, errors)
    sys.stdout = sys.__stdout__ = stream(1, True, os.isatty(1), errors)
    sys.stderr = sys.__stderr__ = stream(2, True, True, "backslashreplace")


def _fresh_state() -> None:
    """What a fresh process reads at start-up from its environment and working directory, read again from the
    job's: random seeds, thread counts (torch's, and numpy's BLAS pools: a product's bits depend on them), the
    temporary folder, matplotlib's rc file and variables."""
    if "random" in sys.modules:
        sys.modules["random"].seed()
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.seed()  # a fresh process's default generator starts from a non-deterministic seed
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        if torch is not None:
            torch.set_num_threads(int(threads))  # what torch would take from OMP_NUM_THREADS at import
        from threadpoolctl import threadpool_limits

        threadpool_limits(int(threads), user_api="blas")   # what OpenBLAS / MKL would take at load
    tempfile.tempdir = None   # torch._dynamo's import fixed the parent's; the job's TMPDIR is read again
    mpl = sys.modules.get("matplotlib")
    if mpl is not None:   # a matplotlibrc in the job's folder, MATPLOTLIBRC: what differs from the parent's rc files
        now, then = mpl.rc_params(), mpl.rcParamsOrig
        mpl.rcParams.update({k: v for k, v in now.items() if k != "backend" and v != then.get(k)})


def _run_script(script: str) -> int:
    """Run ``script`` as ``__main__`` and end as the interpreter does: the exit code of SystemExit, an
    uncaught exception printed (exit 1; KeyboardInterrupt: killed by SIGINT), then threads joined, atexit
    handlers run and stdio flushed."""
    interrupted, main = False, {}
    try:
        main = runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exit_:
        code = _exit_code(exit_.code)
    except BaseException as err:
        interrupted, from_script = isinstance(err, KeyboardInterrupt), _from_script(err.__traceback__, script)
        if interrupted and from_script is None:
            raise  # before the script's first line (runpy still reading it): as during the set-up (Server._child)
        err.__traceback__ = from_script or err.__traceback__
        sys.excepthook(type(err), err, err.__traceback__)
        code = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # join non-daemon threads, as at exit
    except Exception:
        pass
    atexit._run_exitfuncs()
    _clear_main(main)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    if interrupted:
        _end_by(signal.SIGINT)
    return code


def _clear_main(main: dict) -> None:
    """Clear the script's globals as an interpreter clears ``__main__`` at its end, so that what they hold (a file
    never closed) is finalised in order (flushed): they outlived the script in a cycle through its functions, and a
    collected cycle finalises a file's layers in any order. ``main``: run_path's copy; its functions hold them."""
    for value in list(main.values()):
        held = getattr(value, "__globals__", None)
        if isinstance(held, dict) and held is not main and held.get("__file__") == main.get("__file__"):
            held.clear()
            break
    main.clear()


def _from_script(tb, script: str):
    """The traceback from the script's own frame on, as a fresh interpreter prints it (without runpy's); None
    where the script has no frame in it."""
    start = tb
    while start is not None and start.tb_frame.f_code.co_filename != script:
        start = start.tb_next
    return start


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1
