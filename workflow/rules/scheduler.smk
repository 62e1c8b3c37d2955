# A mend of Snakemake's scheduler for this run's process; no rule is defined here.
#
# Snakemake 9.27's JobScheduler starts a timer after every scheduling round (_schedule_reevalutation: the re-check of
# its job rate limiter, --max-jobs-per-timespan, default 100/1s), and the round that timer triggers starts another.
# So every round a finished job triggers adds a chain of timers that never ends, each chain a round a second: with
# hundreds of short jobs, the main process spent about half a core re-scheduling (a rehearsal's jobs take about a
# second: docs/log/2026-11-28-scheduler-timers.md). One pending timer does what the timers are for (look again once
# the rate limit may have passed): keep one. It is a daemon thread, so the run's end does not wait for it.
import threading

from snakemake.scheduling.job_scheduler import JobScheduler


def one_pending_reevaluation(scheduler, delay):
    """JobScheduler._schedule_reevalutation, starting a timer only when none is pending."""
    if getattr(scheduler, "_one_reevaluation_pending", False):
        return
    scheduler._one_reevaluation_pending = True

    def fire():
        scheduler._one_reevaluation_pending = False  # before the release: the round it starts may start the next
        scheduler._open_jobs.release()

    timer = threading.Timer(delay, fire)
    timer.daemon = True
    timer.start()


JobScheduler._schedule_reevalutation = one_pending_reevaluation  # tests/test_scheduler.py fails if the name goes
