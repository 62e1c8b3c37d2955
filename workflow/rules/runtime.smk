# The run's process lifecycle: how its jobs' Python starts (their PYTHONPATH; a warm parent on this
# machine, started in onstart and stopped in onsuccess / onerror), not what they compute. All of it is
# intact.runtime's (docs/design.md, section 8); no rule is defined here.
import glob
import os
import sys

from intact.runtime.warm import ENV_SOCKET as WARM_SOCKET, jobs_pythonpath, preload_modules, start_or_adopt

# every job imports the package from this checkout's src/ (_SRC, the Snakefile's), also when it runs in a
# conda env or on a cluster node, so the code that runs is the code you see
os.environ.update(PYTHONPATH=jobs_pythonpath(_SRC, os.environ.get("PYTHONPATH")))


onstart:
    # Snakemake calls onstart only when jobs are about to run for real: never for -n, --lint, --dag,
    # --summary or the listings, and not when there is nothing to do. (workflow.dryrun cannot say it while
    # this file is parsed: Snakemake sets the executor, which it reads, only after parsing.)
    # a job this run will run needs a missing weights file or data root, or results/ is 0.1's (common.smk):
    # stop before the first
    refuse_missing_inputs(workflow.dag)
    # Jobs on this machine start from a warm parent that has imported what the job scripts import, so no
    # job pays for importing torch (intact.runtime.warm, docs/design.md; INTACT_WARM=0 turns it off): one
    # the environment names (kept across runs), else one this run starts and stops. A cluster executor's
    # jobs, and --touch, run cold, each in its own process: they are not handed a socket, even one inherited.
    if workflow.local_exec and not workflow.touch:
        scripts = glob.glob(f"{workflow.basedir}/workflow/scripts/*.py")
        parent, line = start_or_adopt(preload_modules(scripts, tracking=TRACKING.enabled))
        WARM_PARENT.append(parent)
        if line:
            print(line, file=sys.stderr)
    else:
        os.environ.pop(WARM_SOCKET, None)


def stop_warm_parent():
    """End the warm parent (after the last job: Snakemake has waited for every job by now)."""
    while WARM_PARENT:
        parent = WARM_PARENT.pop()
        if parent is not None:
            parent.stop()


onsuccess:
    stop_warm_parent()


onerror:
    # also after Ctrl-C: Snakemake waits for the running jobs, then calls this (the parent also ends by
    # itself if this process dies: its stdin is a pipe from here)
    stop_warm_parent()


#: the warm parent of this run, once started (onstart); a list, so the handlers can change it
WARM_PARENT = []
