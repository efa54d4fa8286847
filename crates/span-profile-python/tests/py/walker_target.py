"""A target for the walker's real-interpreter tests.

Parks one thread in alpha -> beta -> gamma (waiting on an Event), keeps one thread busy in
burn(), and parks the main thread in main(). Prints the addresses the walker needs, the thread
identities, then "ready". Exits when stdin closes (or after two minutes).
"""
import ctypes
import sys
import threading
import time
import types

stop = threading.Event()


def gamma(parked):
    parked.set()
    stop.wait()  # MARK:gamma


def beta(parked):
    gamma(parked)  # MARK:beta


def alpha(parked):
    beta(parked)  # MARK:alpha


def burn(started):
    started.set()
    x = 0
    while not stop.is_set():  # MARK:burn_while
        x += 1  # MARK:burn_body


def watch_stdin():
    sys.stdin.read()
    stop.set()


def main():
    parked = threading.Event()
    started = threading.Event()
    t_alpha = threading.Thread(target=alpha, args=(parked,), name="alpha-thread", daemon=True)
    t_burn = threading.Thread(target=burn, args=(started,), name="burn-thread", daemon=True)
    t_alpha.start()
    t_burn.start()
    threading.Thread(target=watch_stdin, name="stdin-watch", daemon=True).start()
    parked.wait()
    started.wait()
    runtime = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime"))
    print("runtime", runtime)
    print("types", id(types.CodeType), id(str), id(bytes), id(types.FrameType))
    print("version", sys.version_info[0], sys.version_info[1])
    for t in (t_alpha, t_burn, threading.main_thread()):
        print("thread", t.name, t.ident, t.native_id)
    print("ready", flush=True)
    stop.wait(120)  # MARK:main


main()  # MARK:module
