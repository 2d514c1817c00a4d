# The convoy module never hangs: loaders of their own in Python threads, one loader shared, Ctrl-C
# while a batch is late, a daemon thread still iterating at exit, files that never end (FIFOs).
# Each case runs in a fresh interpreter (numpy not yet imported, as in a user's script) under a
# timeout, so that a hang fails the test instead of stalling CI.
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import BIN

MODULE = os.path.join(BIN, "python")
SHIM = os.path.join(BIN, "libconvoy_io_fault.so")


def script(code, *args, timeout=60, env=None):
    """Runs code in a fresh interpreter; its CompletedProcess, or a failure naming the hang (the
    interpreter and any process it forked are killed then)."""
    full = dict(os.environ, PYTHONPATH=MODULE, PYTHONFAULTHANDLER="1")
    full.update(env or {})
    argv = [sys.executable, "-c", textwrap.dedent(code), *map(str, args)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full,
                          start_new_session=True) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            pytest.fail(f"hung for {timeout} s:\n{out}\n{err}")
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def ok(p):
    assert p.returncode == 0, f"exit {p.returncode}:\n{p.stdout}\n{p.stderr}"
    return p.stdout


def test_own_loaders_in_threads(raw_data, jpeg_data):
    # Every thread its own loader, two over the same folder: each gets its epochs whole, the same
    # batches as one thread alone.
    out = ok(script("""
        import sys, threading
        import convoy
        raw, jpeg = sys.argv[1:3]
        kinds = [(raw, {}), (raw, {}), (jpeg, dict(crop=24, random_resized_crop=True))]
        def ids(loader, epochs=2):
            got = []
            for e in range(epochs):
                loader.set_epoch(e)
                got += [b[2].tolist() for b in loader]
            return got
        got = [None] * len(kinds)
        def run(i):
            d, kw = kinds[i]
            got[i] = ids(convoy.Loader(d, 8, seed=4, with_ids=True, flip=True, **kw))
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(kinds))]
        for t in threads: t.start()
        for t in threads: t.join()
        want = [ids(convoy.Loader(d, 8, seed=4, with_ids=True, flip=True, **kw)) for d, kw in kinds]
        assert got == want, "a thread's batches differ from one thread's"
        print("batches", sum(len(g) for g in got))
    """, raw_data, jpeg_data))
    assert out.startswith("batches ")


def test_first_batches_in_threads_at_once(raw_data):
    # The first batch of the process asked for in several threads at the same moment.
    out = ok(script("""
        import sys, threading
        import convoy
        loaders = [convoy.Loader(sys.argv[1], 8) for _ in range(4)]
        go = threading.Barrier(4)
        sizes = [0] * 4
        def run(i):
            go.wait()
            sizes[i] = sum(len(b[1]) for b in loaders[i])
        threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for t in threads: t.start()
        for t in threads: t.join()
        print(sizes)
    """, raw_data))
    assert out.strip() == str([263 // 8 * 8] * 4)


def test_one_loader_two_threads_each_iterating_is_refused(raw_data):
    # Two threads each running `for b in loader` over one loader would share one stream of batches
    # (or restart it under each other): the second is refused, and once the first has finished the
    # epoch, the loader is free for the other thread.
    out = ok(script("""
        import sys, threading
        import convoy
        loader = convoy.Loader(sys.argv[1], 8, with_ids=True)
        took_one, tried = threading.Event(), threading.Event()
        first = []
        def a():
            it = iter(loader)
            first.append(next(it)[2].tolist())
            took_one.set()
            tried.wait()
            while len(first) < len(loader):  # next(), as `for b in it` would start the epoch over
                first.append(next(it)[2].tolist())
            try:
                next(it)
                first.append("one too many")
            except StopIteration:
                pass
        errors = []
        def b():
            took_one.wait()
            for call in (lambda: iter(loader), lambda: loader.set_epoch(1)):
                try:
                    call()
                    errors.append("accepted")
                except RuntimeError as e:
                    errors.append(str(e))
            tried.set()
        ta, tb = threading.Thread(target=a), threading.Thread(target=b)
        ta.start(); tb.start(); ta.join(); tb.join()
        for e in errors:
            print(e)
        assert len(first) == len(loader), "the first thread's epoch is whole"
        second = []
        t = threading.Thread(target=lambda: second.extend(b[2].tolist() for b in loader))
        t.start(); t.join()
        assert second == first, "after the first thread's epoch, the second thread gets its own, whole"
        print("after: ok")
    """, raw_data))
    lines = out.splitlines()
    assert len(lines) == 3 and lines[2] == "after: ok", out
    for line in lines[:2]:
        assert "another thread" in line and "its own convoy.Loader" in line, line


def test_one_iterator_shared_by_threads_gives_each_batch_once(raw_data):
    # One pass, taken from by several threads with next(): every batch goes to exactly one of them.
    out = ok(script("""
        import sys, threading
        import convoy
        loader = convoy.Loader(sys.argv[1], 8, with_ids=True, seed=5)
        want = sorted(i for b in loader for i in b[2].tolist())
        it = iter(loader)
        got = []
        def pull():
            # next(), not `for b in it`: a `for` calls iter(), which starts the epoch over.
            while True:
                try:
                    b = next(it)
                except StopIteration:
                    return
                got.extend(b[2].tolist())
        threads = [threading.Thread(target=pull) for _ in range(3)]
        for t in threads: t.start()
        for t in threads: t.join()
        assert sorted(got) == want, (len(got), len(want))
        # And a thread that ended in the middle of an epoch does not hold the loader.
        t = threading.Thread(target=lambda: next(iter(loader)))
        t.start(); t.join()
        assert sorted(i for b in loader for i in b[2].tolist()) == want
        print("ok", len(got))
    """, raw_data))
    assert out.strip() == f"ok {263 // 8 * 8}"


def test_loader_dropped_while_a_thread_iterates(raw_data):
    # The main thread lets go of a loader another thread iterates, and that thread keeps arrays past
    # the loader's end: the epoch comes whole and the arrays stay as they were.
    out = ok(script("""
        import gc, sys, threading, weakref
        import convoy
        loader = convoy.Loader(sys.argv[1], 8, with_ids=True)
        started, kept = threading.Event(), []
        def run(l):
            for b in l:
                kept.append((b[2], b[2].copy()))
                started.set()
        t = threading.Thread(target=run, args=(loader,))
        t.start()
        started.wait()
        del loader
        gc.collect()
        t.join()
        gc.collect()
        assert len(kept) == 263 // 8 and all((a == b).all() for a, b in kept)
        print("ok")
    """, raw_data))
    assert out == "ok\n"


def stalled(data, ms):
    """Environment that stalls the reading of the data set's second file for `ms` milliseconds."""
    return dict(LD_PRELOAD=SHIM, CONVOY_FAULT_PATH=os.path.join(data, "batch_00001.cvb"), CONVOY_FAULT_OP="pread",
                CONVOY_FAULT_NTH="1", CONVOY_FAULT_MODE="stall", CONVOY_FAULT_STALL_MS=str(ms))


def test_ctrl_c_while_a_batch_is_late(raw_data):
    # A file that takes long to read (a hung network file system): Ctrl-C stops the wait for it
    # at once with KeyboardInterrupt, not when the file comes.
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import os, sys, time
        import convoy
        loader = convoy.Loader(sys.argv[1], 8, train=False, readers=1, prefetch=1)
        print("waiting", flush=True)
        t = time.monotonic()
        try:
            for b in loader:
                pass
            print("not interrupted", flush=True)
        except KeyboardInterrupt:
            print(f"interrupted after {time.monotonic() - t:.1f} s", flush=True)
        os._exit(0)  # the stalled reader is still in its read: no need to wait for it
    """), raw_data], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=MODULE, **stalled(raw_data, 15000)))
    try:
        assert p.stdout.readline() == "waiting\n"
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert out.startswith("interrupted after "), out + err
    assert float(out.split()[2]) < 5, out


@pytest.mark.parametrize("stall", [0, 2000])
def test_interpreter_exit_while_a_daemon_thread_iterates(stall, jpeg_data):
    # A daemon thread in the middle of an epoch (taking batches, or waiting for a late file) when
    # the interpreter exits: the process ends cleanly, neither aborts nor waits for the thread.
    for attempt in range(3):
        t = time.monotonic()
        p = script("""
            import sys, threading, time
            import convoy
            loader = convoy.Loader(sys.argv[1], 8, crop=24, random_resized_crop=True, readers=2)
            def run():
                e = 0
                while True:
                    loader.set_epoch(e % 3)
                    e += 1
                    for b in loader:
                        pass
            threading.Thread(target=run, daemon=True).start()
            time.sleep(0.3)
            print("main exits", flush=True)
        """, jpeg_data, env=stalled(jpeg_data, stall) if stall else None)
        assert p.returncode == 0 and p.stdout == "main exits\n", f"attempt {attempt}: exit {p.returncode}\n{p.stderr}"
        assert time.monotonic() - t < 20


@pytest.mark.parametrize("name", ["batch_00002.cvb", "dataset.json"])
def test_fifo_in_place_of_a_file_is_refused(name, raw_data, copy_of):
    # A named pipe where a file should be would block its reader forever: refused, naming it.
    data = copy_of(raw_data)
    fifo = os.path.join(data, name)
    os.remove(fifo)
    os.mkfifo(fifo)
    p = script("""
        import sys
        import convoy
        try:
            for train in (True, False):
                for b in convoy.Loader(sys.argv[1], 8, train=train):
                    pass
            print("accepted")
        except convoy.Error as e:
            print(e)
    """, data, timeout=30)
    assert ok(p).startswith(fifo + ": ") and "not a regular file" in p.stdout, p.stdout


def test_loader_used_after_fork(jpeg_data):
    # A child of os.fork() has none of its parent's reader threads: using the parent's loader there
    # is refused (its batches would never come), and the child's exit does not wait for those
    # threads; the parent goes on as before.
    out = ok(script("""
        import os, sys
        import convoy
        loader = convoy.Loader(sys.argv[1], 8, readers=1, prefetch=1, crop=24, random_resized_crop=True)
        n = len(loader)
        next(iter(loader))
        pid = os.fork()
        if pid == 0:
            try:
                for call in (lambda: [next(loader) for _ in range(n)], lambda: loader.set_epoch(1)):
                    call()
                    print("child: accepted", flush=True)
            except RuntimeError as e:
                print("child:", e, flush=True)
            sys.exit(0)  # a normal exit: the loader is destroyed in the child
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        print("parent:", sum(1 for _ in loader), n)
    """, jpeg_data, timeout=30))
    child, parent = out.splitlines()
    assert "child:" in child and "fork" in child and "accepted" not in child, child
    words = parent.split()
    assert words[0] == "parent:" and words[1] == words[2] == str(305 // 8), parent
