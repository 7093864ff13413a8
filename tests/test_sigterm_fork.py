"""`tlm` turns SIGTERM into a one-line stop (commands/common.stop_on_sigterm); a child forked from such a
process must not inherit that: multiprocessing's Pool.terminate() (lm-eval's bootstrap stderr, run inside
`tlm eval`) stops workers with SIGTERM and joins them, and a full-suite run hung in that join."""

import multiprocessing as mp
import signal

from tlm_probe.commands.common import stop_on_sigterm


def _child_handler(_):
    return signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_forked_children_get_the_default_sigterm_back():
    before = signal.getsignal(signal.SIGTERM)
    try:
        stop_on_sigterm()
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # the parent keeps its handler
        pool = mp.get_context("fork").Pool(2)
        try:
            assert pool.map(_child_handler, range(2)) == [True, True]
        finally:
            # close + join, not terminate: once, under heavy load, terminate() left an idle worker
            # un-signalled and joined it forever (a kill -TERM by hand then stopped it at once: its handler
            # was the default); what this test checks is each child's handler, which the map above reads
            pool.close()
            pool.join()
    finally:
        signal.signal(signal.SIGTERM, before)
