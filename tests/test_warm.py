"""Warm local execution (intact.runtime.warm): a job forked from a warm parent runs as a fresh ``python <script>``
would - same output, exit status, signals, state - and a fault in one job touches neither the parent nor
another job. These tests drive the parent with small scripts; tests/test_warm_workflow.py runs the pipeline."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import MLFLOW, NO_MLFLOW, REPO, plain_signals, process_gone, pythonpath
from intact.runtime import protocol, warm

#: a job script as the adapters are: hand_off() first, then the work (chosen by argv[1])
JOB = '''"""a test job"""
from intact.runtime.warm import hand_off

hand_off()
import json, os, signal, sys, time
from pathlib import Path

what = sys.argv[1]
Path("pid.tmp").write_text(str(os.getpid()))
os.rename("pid.tmp", "pid")  # whole when it appears: the tests wait for the file, then read it
if what == "report":
    import random
    import torch
    from intact.methods import METHODS
    import intact.methods
    def target(fd):
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None
    # a warm job holds one socket more than a cold one: its connection to its client
    fds = sorted(int(f) for f in os.listdir("/proc/self/fd") if not (target(f) or "").startswith("socket:"))
    status = dict(line.split(":\t", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":\t" in line)
    print(json.dumps({"sigblk": status["SigBlk"].strip(), "sigign": status["SigIgn"].strip(), "cwd": os.getcwd(),
        "env": {k: v for k, v in os.environ.items() if k.startswith("T_")},
        "leak": getattr(intact.methods, "LEAK", None), "registered": "leaked" in METHODS,
        "torch_seed": torch.initial_seed(), "threads": torch.get_num_threads(),
        "random_differs": random.random() != 0.8444218515250481, "umask": os.umask(0o22), "fds": fds,
        "argv": sys.argv[1:], "stdin": sys.stdin.read(), "main": __name__, "executable": sys.executable}))
elif what == "pollute":
    import random
    import torch
    import intact.methods
    torch.manual_seed(123); torch.set_num_threads(1); random.seed(0)
    intact.methods.LEAK = 1
    intact.methods.METHODS._found["leaked"] = intact.methods.METHODS["coda_p"]  # the registry's own table
    os.environ["T_LEAK"] = "1"; os.chdir("/"); os.umask(0o77); open("/proc/self/stat")
elif what == "value":
    import warm_probe_mod
    print("value", warm_probe_mod.VALUE)
elif what == "threads":
    import tempfile
    import matplotlib
    import numpy
    from threadpoolctl import threadpool_info
    print(json.dumps({"blas": sorted(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"),
                      "tmp": tempfile.gettempdir(), "font": matplotlib.rcParams["font.size"]}))
elif what == "nap":
    time.sleep(12)
elif what == "unclosed":   # a file never closed, held by the script's globals (a function keeps them in a cycle)
    out = open("unclosed.txt", "w")
    out.write("written")
    def keeps_the_globals():
        return out
elif what == "exit3":
    sys.exit(3)
elif what == "crash":
    raise RuntimeError("boom")
elif what == "sleep":
    time.sleep(60)
elif what == "term":  # a stop flag as intact.train's: SIGTERM asks for a checkpoint and an exit
    signal.signal(signal.SIGTERM, lambda *a: (Path("checkpointed").write_text("yes"), sys.exit(5)))
    Path("ready").write_text("1")
    time.sleep(60)
print("done", what)
'''


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    """A warm parent that preloads what the job script imports (torch and intact.methods)."""
    p = warm.start(["torch", "intact.methods"])
    assert p is not None and os.environ[warm.ENV_SOCKET] == p.path
    yield p
    p.stop()
    assert os.environ.get(warm.ENV_SOCKET) != p.path and _socket_gone(p.path)


def _socket_gone(path: str) -> bool:
    """No file left for a path; an abstract name (``@name``) no longer in the kernel's list of Unix sockets."""
    if path.startswith("@"):
        return not any(line.rstrip().endswith(" " + path) for line in Path("/proc/net/unix").read_text().splitlines())
    return not os.path.exists(os.path.dirname(path))


def _job(folder: Path, what: str, *, warm_socket: str | None, env: dict | None = None, **kw) -> subprocess.Popen:
    kw.setdefault("preexec_fn", plain_signals)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.py").write_text(JOB)
    full = {k: v for k, v in os.environ.items() if k != warm.ENV_SOCKET}
    full.update(env or {})
    if warm_socket:
        full[warm.ENV_SOCKET] = warm_socket
    return subprocess.Popen([sys.executable, "job.py", what], cwd=folder, env=full, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _run(folder, what, warm_socket, stdin="", env=None, **kw):
    proc = _job(folder, what, warm_socket=warm_socket, env=env, **kw)
    out, err = proc.communicate(stdin, timeout=120)
    return proc.returncode, out, err


def _wait_for(path: Path, timeout: float = 60) -> None:
    end = time.time() + timeout
    while not path.exists():
        assert time.time() < end, f"{path} never appeared"
        time.sleep(0.02)


@pytest.mark.slow
def test_a_warm_job_sees_what_a_cold_job_sees_and_nothing_of_the_job_before(parent, tmp_path):
    """The state a job starts from - cwd, environment, umask, open files, argv, stdin, __name__, torch's seed,
    random state and thread count, the method registry, module attributes - is a fresh process's, although
    the job before it in the same parent changed every one of them."""
    seeds = []
    for env in ({}, {"OMP_NUM_THREADS": "1"}):
        assert _run(tmp_path / "a", "pollute", parent.path)[0] == 0
        code, out, err = _run(tmp_path / "w", "report", parent.path, stdin="in", env=env)
        assert code == 0, err
        assert "no warm parent" not in err  # it did run warm
        code, cold_out, err = _run(tmp_path / "c", "report", None, stdin="in", env=env)
        assert code == 0, err
        hot, cold = json.loads(out.splitlines()[0]), json.loads(cold_out.splitlines()[0])
        assert hot.pop("cwd").endswith("/w") and cold.pop("cwd").endswith("/c")
        seeds += [hot.pop("torch_seed"), cold.pop("torch_seed")]  # a fresh process's: non-deterministic
        assert hot == cold
        assert hot["leak"] is None and not hot["registered"] and hot["env"] == {} and hot["stdin"] == "in"
    assert len(set(seeds)) == 4 and 123 not in seeds
    trace_pids = int((tmp_path / "w/pid").read_text()), int((tmp_path / "c/pid").read_text())
    assert trace_pids[0] != parent.pid


@pytest.mark.slow
def test_a_warm_job_reads_its_blas_threads_tmpdir_and_matplotlibrc_as_a_cold_one_does(tmp_path):
    """What a fresh process reads from its environment and folder when numpy's BLAS, tempfile and matplotlib
    start: a warm job had the parent's (BLAS pools of the parent's size, so numpy's products differed in their
    last bits; the TMPDIR torch._dynamo's import fixed; the parent's rc files), before 2026-12-01."""
    p = warm.start(["numpy", "matplotlib", "threadpoolctl", "torch._dynamo"], export=False)
    try:
        env = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
        got = {}
        for name, socket_ in (("warm", p.path), ("cold", None)):
            (tmp_path / name).mkdir()
            (tmp_path / name / "matplotlibrc").write_text("font.size: 21\n")
            code, out, err = _run(tmp_path / name, "threads", socket_, env=env)
            assert code == 0 and "no warm parent" not in err, err
            got[name] = json.loads(out.splitlines()[0])
        assert got["warm"] == got["cold"] == {"blas": got["cold"]["blas"], "tmp": str(tmp_path), "font": 21.0}
        assert got["cold"]["blas"] and set(got["cold"]["blas"]) == {1}
    finally:
        p.stop()


@pytest.mark.slow
def test_ctrl_c_on_intact_warm_lets_its_running_jobs_end_as_they_would(tmp_path):
    """`intact warm` killed its parent 10 s after a Ctrl-C: a job still running lost its exit status (it exited 1,
    and Snakemake deleted its outputs) though it finished (before 2026-12-01). Now the parent ends once its jobs
    have."""
    checkout = tmp_path / "checkout"
    (checkout / "workflow/scripts").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k != warm.ENV_SOCKET}
    env["PYTHONPATH"] = pythonpath()
    keeper = subprocess.Popen([sys.executable, "-m", "intact.cli", "warm", "--checkout", str(checkout)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=plain_signals)
    path = keeper.stdout.readline().strip().split("=", 1)[1]
    job = _job(tmp_path / "j", "nap", warm_socket=path,
               env={"PYTHONPATH": warm.jobs_pythonpath(str(checkout / "src"), env["PYTHONPATH"])})
    _wait_for(tmp_path / "j/pid")
    assert int((tmp_path / "j/pid").read_text()) != job.pid   # served warm
    keeper.send_signal(signal.SIGINT)
    out, err = job.communicate(timeout=120)
    assert (job.returncode, out.strip()) == (0, "done nap"), err
    assert keeper.wait(60) == 0 and "stopping once its running jobs end" in keeper.stderr.read()


def _nohup_like() -> None:
    """A job started with SIGHUP ignored (nohup) and SIGUSR2 blocked."""
    plain_signals()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])


@pytest.mark.slow
def test_a_warm_job_inherits_the_signal_state_its_cold_self_would(parent, tmp_path):
    """Blocked and ignored signals pass through exec to a cold job; a warm job gets its client's, not the
    warm parent's (which ignores SIGINT, and may have inherited anything from whoever started it)."""
    reports = []
    for preexec in (plain_signals, _nohup_like):
        code, out, err = _run(tmp_path / "w", "report", parent.path, preexec_fn=preexec)
        assert code == 0 and "no warm parent" not in err, err
        code, cold_out, err = _run(tmp_path / "c", "report", None, preexec_fn=preexec)
        assert code == 0, err
        hot, cold = json.loads(out.splitlines()[0]), json.loads(cold_out.splitlines()[0])
        assert (hot["sigblk"], hot["sigign"]) == (cold["sigblk"], cold["sigign"])
        reports.append(hot)
    plain, nohup = (int(r["sigblk"], 16) for r in reports), (int(r["sigign"], 16) for r in reports)
    blocked_plain, blocked_nohup = plain
    ignored_plain, ignored_nohup = nohup
    def bit(sig):
        return 1 << (sig - 1)
    assert blocked_plain & bit(signal.SIGUSR2) == 0 and blocked_nohup & bit(signal.SIGUSR2)
    assert ignored_plain & bit(signal.SIGHUP) == 0 and ignored_nohup & bit(signal.SIGHUP)
    assert ignored_plain & bit(signal.SIGINT) == 0  # the parent ignores SIGINT; its job does not


@pytest.mark.slow
def test_a_file_the_job_never_closed_is_flushed_as_at_a_cold_jobs_end(parent, tmp_path):
    """The script's globals outlived it in a reference cycle: its buffered writes were lost (before 2026-12-01)."""
    for name, socket_ in (("w", parent.path), ("c", None)):
        assert _run(tmp_path / name, "unclosed", socket_)[0] == 0
        assert (tmp_path / name / "unclosed.txt").read_text() == "written", name


@pytest.mark.slow
def test_exit_status_output_and_traceback_are_the_cold_jobs(parent, tmp_path):
    for what, expect in (("exit3", 3), ("crash", 1), ("sleep-no", 0)):
        hot = _run(tmp_path / "w", what, parent.path)
        cold = _run(tmp_path / "c", what, None)
        assert hot[0] == cold[0] == expect
        assert hot[1] == cold[1]
        assert hot[2].replace("/w/", "/c/") == cold[2]  # the traceback starts at the script, as a cold one


@pytest.mark.slow
def test_signals_reach_the_job_once_and_its_status_reaches_the_caller(parent, tmp_path):
    """SIGTERM: the job's handler checkpoints and exits (5); SIGINT: KeyboardInterrupt, killed by SIGINT;
    SIGKILL of the job's process: the caller sees -9 - each as for a cold job."""
    for socket_path, name in ((parent.path, "w"), (None, "c")):
        folder = tmp_path / name / "term"
        proc = _job(folder, "term", warm_socket=socket_path)
        _wait_for(folder / "ready")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 5 and (folder / "checkpointed").read_text() == "yes"

        folder = tmp_path / name / "int"
        proc = _job(folder, "sleep", warm_socket=socket_path)
        _wait_for(folder / "pid")
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == -signal.SIGINT
        assert "KeyboardInterrupt" in proc.stderr.read()

        folder = tmp_path / name / "kill"
        proc = _job(folder, "sleep", warm_socket=socket_path)
        _wait_for(folder / "pid")
        os.kill(int((folder / "pid").read_text()), signal.SIGKILL)
        assert proc.wait(60) == -signal.SIGKILL


def test_a_killed_client_takes_its_job_along_and_nothing_else(parent, tmp_path):
    """SIGKILL of the job's client (the process Snakemake started and would kill): its job process ends too;
    a job running beside it and the parent are untouched (the parent serves the next job)."""
    other = _job(tmp_path / "other", "term", warm_socket=parent.path)
    victim = _job(tmp_path / "victim", "sleep", warm_socket=parent.path)
    _wait_for(tmp_path / "victim/pid")
    _wait_for(tmp_path / "other/ready")
    job_pid = int((tmp_path / "victim/pid").read_text())
    assert job_pid != victim.pid  # the job runs in the parent's child, not in the client
    victim.kill()
    assert victim.wait(60) == -signal.SIGKILL
    assert process_gone(job_pid)
    assert other.poll() is None
    other.send_signal(signal.SIGTERM)
    assert other.wait(60) == 5
    assert parent.proc.poll() is None
    assert _run(tmp_path / "next", "exit3", parent.path)[0] == 3


def test_without_a_warm_parent_a_job_runs_cold(tmp_path, monkeypatch):
    """INTACT_WARM=0: no parent starts; a socket nobody serves, or a parent of another Python: the job runs
    in its own process, as before."""
    monkeypatch.delenv(warm.ENV_SOCKET, raising=False)
    monkeypatch.setenv(warm.ENV_SWITCH, "0")
    assert warm.start(["json"]) is None and warm.ENV_SOCKET not in os.environ
    code, out, err = _run(tmp_path / "off", "exit3", str(tmp_path / "no-socket"), env={warm.ENV_SWITCH: "0"})
    assert code == 3 and "no warm parent" not in err and int((tmp_path / "off/pid").read_text())
    monkeypatch.delenv(warm.ENV_SWITCH)
    code, out, err = _run(tmp_path / "gone", "exit3", str(tmp_path / "no-socket"))
    assert code == 3 and "no warm parent for this job" in err
    p = warm.start(["json"])
    try:
        folder = tmp_path / "other-python"
        folder.mkdir()
        (folder / "job.py").write_text(JOB)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        # the venv's interpreter started outside the venv (its base binary: another sys.prefix): refused, runs cold
        link = tmp_path / "python-alias"
        link.symlink_to(os.path.realpath(sys.executable))
        proc = subprocess.run([str(link), "job.py", "exit3"], cwd=folder, env=env, capture_output=True, text=True)
        assert proc.returncode == 3 and "another Python" in proc.stderr
    finally:
        p.stop()


@pytest.mark.slow
def test_the_parent_ends_with_its_starter_and_leaves_no_process(tmp_path):
    """stop() ends the parent (after its running job); if the process that started it dies - even by
    SIGKILL - the parent ends by itself (its stdin closes); SIGINT (Ctrl-C) alone does not end it."""
    p = warm.start(["json"])
    job = _job(tmp_path / "a", "sleep", warm_socket=p.path)
    _wait_for(tmp_path / "a/pid")
    job_pid = int((tmp_path / "a/pid").read_text())
    os.kill(p.pid, signal.SIGINT)
    time.sleep(0.3)
    assert p.proc.poll() is None
    job.send_signal(signal.SIGTERM)
    assert job.wait(60) == -signal.SIGTERM
    p.stop()
    assert process_gone(p.pid) and process_gone(job_pid) and _socket_gone(p.path)

    starter = subprocess.Popen([sys.executable, "-c", "import sys, time; from intact.runtime import warm; "
                                "p = warm.start(['json']); print(p.pid, flush=True); time.sleep(60)"],
                               stdout=subprocess.PIPE, text=True)
    pid = int(starter.stdout.readline())
    starter.kill()
    starter.wait()
    assert process_gone(pid)


@pytest.mark.slow
def test_killing_the_whole_process_group_leaves_no_job(tmp_path):
    """SIGKILL of the workflow's whole process group (its parent, the clients; test_workflow's random kills):
    the job processes - in process groups of their own - end too, although their parent died with them, and
    the socket goes with them (no file is left in the temporary folder)."""
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "job.py").write_text(JOB)
    starter = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; from intact.runtime import warm; "
         "p = warm.start(['json']); print(p.pid, p.path, flush=True); "
         "subprocess.Popen([sys.executable, 'job.py', 'sleep']); time.sleep(60)"],
        cwd=folder, stdout=subprocess.PIPE, text=True, start_new_session=True)
    parent_pid, path = starter.stdout.readline().split()
    parent_pid = int(parent_pid)
    assert not _socket_gone(path)  # the check below can see a socket
    _wait_for(folder / "pid")
    job_pid = int((folder / "pid").read_text())
    os.killpg(starter.pid, signal.SIGKILL)
    starter.wait()
    assert process_gone(parent_pid) and process_gone(job_pid) and _socket_gone(path)


def test_a_job_under_another_import_path_or_after_a_code_change_runs_cold(tmp_path, monkeypatch):
    """A parent serves only jobs that would import what it imported: a job under another PYTHONPATH (a
    plugin's folder), or one that starts after a module the parent imported was edited, runs cold and sees
    the code as it is now; probe() says why. With the file as it was, the parent serves again."""
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    mod = plugin / "warm_probe_mod.py"
    mod.write_text("VALUE = 1\n")
    # the plugin's folder first, then the package's sources as the test process has them (a worktree's)
    monkeypatch.setenv("PYTHONPATH", pythonpath(plugin))
    p = warm.start(["warm_probe_mod"], export=False)
    try:
        assert warm.probe(p.path) == ""
        code, out, err = _run(tmp_path / "a", "value", p.path)
        assert (code, out.split("\n")[0]) == (0, "value 1") and "no warm parent" not in err
        other = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ["PYTHONPATH"]])}
        code, out, err = _run(tmp_path / "b", "value", p.path, env=other)
        assert (code, out.split("\n")[0]) == (0, "value 1") and "another Python, import path or start-up variable " \
            "(PYTHONPATH)" in err
        # a variable read when a library the parent imported was imported (timm's TIMM_FUSED_ATTN picks the
        # attention kernel then): a warm job would have run with the parent's value (found 2026-12-01)
        code, out, err = _run(tmp_path / "f", "value", p.path, env={"TIMM_FUSED_ATTN": "0"})
        assert code == 0 and "start-up variable (TIMM_FUSED_ATTN)" in err, err
        saved = mod.stat()
        mod.write_text("VALUE = 2\n")
        os.utime(mod, ns=(saved.st_atime_ns, saved.st_mtime_ns + 10**9))  # a later edit, whatever the clock's grain
        assert "code changed since the warm parent started" in warm.probe(p.path) and str(mod) in warm.probe(p.path)
        code, out, err = _run(tmp_path / "c", "value", p.path)
        assert (code, out.split("\n")[0]) == (0, "value 2") and "code changed" in err
        mod.write_text("VALUE = 1\n")
        os.utime(mod, ns=(saved.st_atime_ns, saved.st_mtime_ns))
        assert warm.probe(p.path) == ""
        code, out, err = _run(tmp_path / "d", "value", p.path)
        assert (code, out.split("\n")[0]) == (0, "value 1") and "no warm parent" not in err
        # a module added beside one the parent imported (a new method is one file): a job may import it, the
        # parent's listing of the folder (the registry's) lacks it
        (plugin / "warm_probe_new.py").write_text("")
        assert "code changed" in warm.probe(p.path) and str(plugin) in warm.probe(p.path)
        (plugin / "warm_probe_new.py").unlink()
        assert warm.probe(p.path) == ""
    finally:
        p.stop()
    assert warm.probe(p.path).startswith("unavailable")
    # a file saved while the parent was importing: it may have read the code before the edit
    (plugin / "warm_probe_late.py").write_text("import os\nos.utime(__file__)\n")
    p = warm.start(["warm_probe_mod", "warm_probe_late"], export=False)
    try:
        assert "code changed" in warm.probe(p.path) and "warm_probe_late.py" in warm.probe(p.path)
    finally:
        p.stop()


def test_off_linux_no_parent_starts_and_the_run_and_intact_warm_say_why(monkeypatch, capsys):
    """A warm parent takes Linux's Unix sockets (SOCK_SEQPACKET, abstract names, SO_PEERCRED; macOS has none): on
    another system none starts, the run's line says why, its jobs run cold, and ``intact warm`` stops, saying why.
    On Linux, a parent that fails to start is named too."""
    monkeypatch.delenv(warm.ENV_SOCKET, raising=False)
    monkeypatch.setattr(warm.sys, "platform", "darwin")
    assert warm.start(["json"]) is None and warm.ENV_SOCKET not in os.environ
    parent, line = warm.start_or_adopt(["json"])
    assert parent is None and line == ("intact: no warm parent (warm parents need Linux's Unix sockets; this is "
                                       "darwin); jobs run cold")
    assert warm.keep(["--checkout", str(REPO)]) == 1
    assert "intact warm: no warm parent (warm parents need Linux's Unix sockets" in capsys.readouterr().err
    monkeypatch.setattr(warm.sys, "platform", "linux")
    popen = subprocess.Popen   # a parent that ends before it listens
    monkeypatch.setattr(warm.subprocess, "Popen", lambda *a, **k: popen([sys.executable, "-c", "pass"], **k))
    assert warm.start_or_adopt(["json"]) == (None, "intact: no warm parent (it did not start: its error is above); "
                                                   "jobs run cold")
    monkeypatch.setenv(warm.ENV_SWITCH, "0")
    assert warm.start_or_adopt(["json"]) == (None, "")     # switched off: nothing to say


def test_a_run_adopts_a_serving_parent_the_environment_names_and_starts_its_own_otherwise(parent, monkeypatch):
    """start_or_adopt (the workflow's onstart): a socket in the environment whose parent serves this Python is
    used and left running (nothing to stop); a dead one is dropped and a parent of the run's own started.
    A parent started inside another's reach gives the outer socket back when it stops."""
    monkeypatch.setenv(warm.ENV_SOCKET, parent.path)
    kept, line = warm.start_or_adopt(["json"])
    assert kept is None and "kept" in line and parent.path in line and os.environ[warm.ENV_SOCKET] == parent.path
    inner = warm.start(["json"])
    assert os.environ[warm.ENV_SOCKET] == inner.path
    inner.stop()
    assert os.environ[warm.ENV_SOCKET] == parent.path and parent.proc.poll() is None
    monkeypatch.setenv(warm.ENV_SOCKET, "@intact-warm-served-by-nobody")
    own, line = warm.start_or_adopt(["json"])
    try:
        assert own is not None and os.environ[warm.ENV_SOCKET] == own.path and f"pid {own.pid}" in line
    finally:
        own.stop()
    assert warm.ENV_SOCKET not in os.environ and process_gone(own.pid)


def test_the_jobs_pythonpath_has_the_sources_first_once():
    """What the Snakefile gives its jobs and a kept parent must share (jobs_pythonpath): a run inside a job,
    whose PYTHONPATH already starts with the sources, keeps it as it is."""
    sep = os.pathsep
    assert warm.jobs_pythonpath("/s", None) == warm.jobs_pythonpath("/s", "") == "/s"
    assert warm.jobs_pythonpath("/s", f"/p{sep}/s") == f"/s{sep}/p{sep}/s"
    assert warm.jobs_pythonpath("/s", f"/s{sep}/p") == f"/s{sep}/p"


def test_every_job_script_hands_off_before_its_imports():
    """Each workflow script's first statements (after its docstring) are the hand-off: a script without it runs cold,
    paying its imports in every job (tune_select did: ~6 s a job, 9 in a paper rehearsal)."""
    import ast

    for script in sorted((REPO / "workflow" / "scripts").glob("*.py")):
        body = ast.parse(script.read_text()).body
        body = body[1:] if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else body
        first = [ast.unparse(node) for node in body[:2]]
        assert first == ["from intact.runtime.warm import hand_off", "hand_off()"], script.name


@pytest.mark.slow
@pytest.mark.skipif(not MLFLOW, reason=NO_MLFLOW)
def test_a_tracking_runs_parent_has_imported_mlflow_without_a_thread():
    """A run that tracks preloads MLflow (each track_run job would import it: ~4 s on 2 cores), one that does not,
    not; the preload starts no thread (a parent forks its jobs) and MLflow's telemetry is off before its import."""
    scripts = [str(p) for p in (REPO / "workflow" / "scripts").glob("*.py")]
    assert warm.TRACKING_PRELOAD[0] in warm.preload_modules(scripts)
    assert not set(warm.TRACKING_PRELOAD) & set(warm.preload_modules(scripts, tracking=False))
    code = ("import sys, threading, os; import intact.tracking.preload; "
            "print(threading.active_count(), 'mlflow.store.tracking.sqlalchemy_store' in sys.modules, "
            "os.environ['MLFLOW_DISABLE_TELEMETRY'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "True", "true"]


def test_the_tracking_preload_imports_nothing_where_mlflow_is_not_installed():
    """`intact warm` preloads for a run that tracks; where MLflow is missing that preload must not end the parent
    (it did: every job then ran cold). Each track_run job records its run pending, naming the module, instead."""
    code = "import sys; sys.modules['mlflow'] = None; import intact.tracking.preload; print('imported')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.split() == ["imported"], out.stderr[-2000:]


@pytest.mark.slow
def test_the_kits_snakemake_starts_from_a_warm_parent_with_a_cold_runs_output_and_status(tmp_path, monkeypatch):
    """intact.testing.snakemake, where intact.runtime.warm_snakemake.ENV_SOCKET names a parent (the suite's), runs
    Snakemake in a child of it: the same output and exit status as ``python -m snakemake``, a failing run
    included. A call that sets a PYTHON* variable (its Python must start as that says) runs cold."""
    from intact.runtime import warm_snakemake
    from intact.testing import REPO, snakemake, tiny_config, write_config
    from intact.runtime.warm_server import ENV_TRACE

    write_config(tmp_path / "ok", tiny_config())
    bad = tiny_config()
    bad["optim"]["lr_hed"] = 1.0
    write_config(tmp_path / "bad", bad)
    trace = tmp_path / "trace"
    monkeypatch.setenv(ENV_TRACE, str(trace))  # read by the parent it starts
    parent = warm_snakemake.start(REPO)
    assert parent is not None
    try:
        monkeypatch.setenv(warm_snakemake.ENV_SOCKET, parent.path)
        warm_runs = [snakemake(tmp_path / "ok", "-n", "--quiet", "rules"),
                     snakemake(tmp_path / "bad", "-n", check=False)]
        profiled = snakemake(tmp_path / "ok", "-n", "--quiet", "rules", env={"PYTHONPROFILEIMPORTTIME": "1"})
        monkeypatch.delenv(warm_snakemake.ENV_SOCKET)
        cold_runs = [snakemake(tmp_path / "ok", "-n", "--quiet", "rules"),
                     snakemake(tmp_path / "bad", "-n", check=False)]
    finally:
        parent.stop()
    lines = trace.read_text().splitlines()
    assert [line.split()[0] for line in lines].count("start") == 2, lines
    assert all(line.endswith("warm_snakemake/__main__.py") for line in lines if line.startswith("start"))
    assert sorted(int(line.split()[2]) != 0 for line in lines if line.startswith("exit")) == [False, True]
    # Snakemake's header names the date, a random workflow id and the command (python -m intact.runtime.warm_snakemake)
    same = lambda out: [line for line in out.splitlines() if not re.match(r"  (Date|Workflow ID|Command): ", line)]  # noqa: E731
    for hot, cold in zip(warm_runs, cold_runs):
        assert hot.returncode == cold.returncode and same(hot.stdout) == same(cold.stdout)
    assert warm_runs[1].returncode != 0 and "optim.lr_hed" in warm_runs[1].stdout + warm_runs[1].stderr
    assert "optim.lr_hed" in cold_runs[1].stdout + cold_runs[1].stderr
    assert "import time:" in profiled.stderr and "snakemake.workflow" in profiled.stderr


# ---- the protocol: every message length-prefixed and read whole; anything else runs the job cold ----------

def _pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def test_a_message_arrives_whole_whatever_its_size_and_characters():
    """A message longer than one record (a reason, an environment), with characters outside ASCII and the
    lone surrogates that stand for a file name's undecodable bytes, arrives as it was sent; so do the file
    descriptors sent with it."""
    reason = "code changed since the warm parent started: /tmp/aé/clone/src/\udcff" + "é" * 150_000
    message = {"refused": reason + "/a\udcff.py", "argv": ["job.py", "ü"]}
    assert len(protocol.encode(message)) > 1  # several records
    a, b = _pair()
    with a, b:
        sender = threading.Thread(target=protocol.send, args=(a, message, [0, 1, 2]))
        sender.start()  # the records fill the socket's buffer: read them meanwhile
        got, fds = protocol.receive(b, max_fds=3)
        sender.join()
        assert got == message and len(fds) == 3
        for fd in fds:
            os.close(fd)
        a.close()
        assert protocol.receive(b) == (None, [])  # the other end closed, between messages


#: records that are not a message of the protocol, and what the reader says of each
_LENGTH = struct.Struct("!I").pack
BAD_RECORDS = {
    "short": ([b"\xff\xfe"], "shorter than a message's length"),
    "not UTF-8": ([_LENGTH(4) + b"\xff\xfe\xfd\xfc"], "not a JSON message"),
    "not JSON": ([_LENGTH(5) + b"pid 7"], "not a JSON message"),
    "cut short": ([_LENGTH(50) + b'{"pid": '], "the connection closed after 8 of a message's 50 bytes"),
    "too long": ([_LENGTH(protocol.MAX_MESSAGE + 1)], "longer than"),
    "longer than its length": ([_LENGTH(2) + b'{}{}'], "4 bytes where the message's length says 2"),
    "not an object": ([_LENGTH(3) + b"[7]"], "a JSON list, not an object"),
}


@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_what_is_not_a_whole_message_is_refused_with_what_is_wrong(case):
    records, why = BAD_RECORDS[case]
    a, b = _pair()
    with a, b:
        for record in records:
            a.send(record)
        a.close()
        with pytest.raises(protocol.ProtocolError, match=re.escape(why)):
            protocol.receive(b)


def _fake_parent(records: list[bytes], gate: threading.Event | None = None) -> str:
    """A socket whose one client gets ``records`` for an answer to its request (after ``gate`` is set)."""
    path = f"@intact-test-{secrets.token_hex(8)}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(protocol.address(path))
    listener.listen(1)

    def serve() -> None:
        conn, _ = listener.accept()
        listener.close()
        with conn:
            _, fds, _, _ = socket.recv_fds(conn, protocol.RECORD, 3)
            for fd in fds:
                os.close(fd)
            if gate is not None:
                gate.wait(60)
            for record in records:
                conn.send(record)

    threading.Thread(target=serve, daemon=True).start()
    return path


ANSWERS = {**BAD_RECORDS,
           "an unknown answer": (protocol.encode({"pid": "7"}), 'an answer it does not know: {"pid": "7"}'),
           "a long refusal": (protocol.encode({"refused": "why " + "é" * 100_000 + " end"}),
                              "refused: why " + "é" * 100_000 + " end")}


@pytest.mark.parametrize("case", sorted(ANSWERS))
def test_an_answer_that_is_not_the_protocols_runs_the_job_cold_and_says_why(tmp_path, case):
    """Whatever a job's client gets back - a record cut short, bytes that are not UTF-8 or not JSON, an answer
    it does not know - it runs the job cold, with the reason whole on stderr (a refusal of any length too)."""
    records, why = ANSWERS[case]
    code, out, err = _run(tmp_path, "exit3", _fake_parent(records))
    assert code == 3 and (tmp_path / "pid").exists()
    assert "intact: no warm parent for this job (" in err and why in err and "running it cold" in err, err[-500:]
    assert "Traceback" not in err


def test_the_parent_refuses_a_request_that_is_not_the_protocols_and_serves_the_next_job(parent, tmp_path):
    """A request cut short, not JSON, or of the wrong shape is refused with what is wrong with it; the parent
    serves on."""
    for records, why in ([b"\x00"], "shorter than a message's length"),\
            ([_LENGTH(3) + b"\xffab"], "not a JSON message"),\
            (protocol.encode({"script": 7}), "a request whose 'script' is not a str"):
        with protocol.connect(parent.path, timeout=60) as sock:
            socket.send_fds(sock, records[:1], [0, 1, 2])
            answer, _ = protocol.receive(sock)
        assert why in answer["refused"], answer
    code, out, err = _run(tmp_path, "exit3", parent.path)
    assert code == 3 and "no warm parent" not in err, err


@pytest.mark.parametrize("folder", ["aé/clone", "a\udcff/clone"])
def test_a_checkout_at_a_path_outside_ascii_runs_its_jobs_cold_after_an_edit_with_the_whole_reason(tmp_path, folder,
                                                                                                 monkeypatch):
    """A checkout under a folder named outside ASCII (or with a byte that is no UTF-8): its jobs run warm; once
    a source the parent imported is edited, the next job runs cold and says which file, in full."""
    checkout = tmp_path / folder
    (checkout / "src").mkdir(parents=True)
    mod = checkout / "src" / "warm_probe_mod.py"
    mod.write_text("VALUE = 1\n")
    monkeypatch.setenv("PYTHONPATH", pythonpath(mod.parent))
    p = warm.start(["warm_probe_mod"], export=False)
    try:
        code, out, err = _run(checkout / "job", "value", p.path)
        assert (code, out.split("\n")[0]) == (0, "value 1") and "no warm parent" not in err, err
        saved = mod.stat()
        mod.write_text("VALUE = 2\n")
        os.utime(mod, ns=(saved.st_atime_ns, saved.st_mtime_ns + 10**9))
        assert warm.probe(p.path) == f"refused: code changed since the warm parent started: {mod}"
        code, out, err = _run(checkout / "job", "value", p.path)
        assert (code, out.split("\n")[0]) == (0, "value 2"), err
        shown = str(mod).encode("utf-8", "backslashreplace").decode()  # as stderr writes an undecodable byte
        assert f"(refused: code changed since the warm parent started: {shown}); running it cold" in err, err
    finally:
        p.stop()


def _relaying(pid: int, timeout: float = 60) -> None:
    """Wait until process ``pid`` handles SIGUSR1: a client has then sent its request and relays signals."""
    end = time.time() + timeout
    while not int(re.search(r"SigCgt:\s*(\w+)", Path(f"/proc/{pid}/status").read_text())[1], 16) & (1 << 9):
        assert time.time() < end, "the client never relayed signals"
        time.sleep(0.02)


def test_a_sigint_while_the_warm_child_sets_itself_up_ends_the_job_as_it_ends_a_cold_one(tmp_path):
    """A Ctrl-C that reaches the client after it has handed its job over, before the job's child has set itself
    up (here: the parent stopped while the request waits), reaches the child as soon as it reads its client:
    the job ends killed by SIGINT, as a cold job would - not exit 70 with the warm parent's traceback."""
    trace = tmp_path / "trace"
    p = warm.start(["json"], export=False, env={**os.environ, "INTACT_WARM_TRACE": str(trace)})
    try:
        os.kill(p.pid, signal.SIGSTOP)
        try:
            job = _job(tmp_path / "job", "sleep", warm_socket=p.path)
            _relaying(job.pid)
            job.send_signal(signal.SIGINT)
        finally:
            os.kill(p.pid, signal.SIGCONT)
        assert job.wait(60) == -signal.SIGINT
        err = job.stderr.read()
        assert "warm_server" not in err and "no warm parent" not in err, err
    finally:
        p.stop()
    ends = [line.split() for line in trace.read_text().splitlines() if line.startswith("exit")]
    assert len(ends) == 1 and os.WTERMSIG(int(ends[0][2])) == signal.SIGINT, ends
    assert process_gone(int(ends[0][1]))


def test_a_sigint_before_a_refusal_ends_the_cold_job(tmp_path):
    """A Ctrl-C that the client relays while it waits for an answer, which then says to run cold: the signal is
    not lost with the connection; the job ends killed by SIGINT before its script runs, as a cold job would."""
    gate = threading.Event()
    job = _job(tmp_path, "exit3", warm_socket=_fake_parent(protocol.encode({"refused": "a test's"}), gate))
    _relaying(job.pid)
    job.send_signal(signal.SIGINT)
    gate.set()
    assert job.wait(60) == -signal.SIGINT
    assert "KeyboardInterrupt" in job.stderr.read() and not (tmp_path / "pid").exists()


def test_no_science_module_imports_the_runtime():
    """The process machinery is fenced (docs/design.md, section 8): only intact.cli, intact.testing and the
    runtime package itself import intact.runtime (anywhere in a module, function-level imports included)."""
    from intact.sources import SRC, imported_modules

    allowed = {SRC / "intact" / "cli.py", SRC / "intact" / "testing.py"}
    importers = [str(path.relative_to(SRC)) for path in sorted((SRC / "intact").rglob("*.py"))
                 if path not in allowed and "runtime" not in path.relative_to(SRC / "intact").parts
                 and any(m == "intact.runtime" or m.startswith("intact.runtime.") for m in imported_modules(path))]
    assert not importers
