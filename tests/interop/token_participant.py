"""A redis-py participant for tests/token_interop.rs: takes the same key as the Rust side, with
redis-py's own `Lock`, and reports what it did.

    python token_participant.py URL KEY LOG MODE SECONDS TTL_MS

MODE:
  contend  for SECONDS, take the lock (polling every 5 ms, 1 s at most per try), and in each
           critical section append `enter py PID TOKEN` and `leave py PID TOKEN` to LOG
           (O_APPEND: one write each), checking before each line that the key still holds its
           token (else `stolen py ...`); release; a release that finds the token gone appends
           `notowned py ...`. Prints `acquired N` at the end.
  hold     take the lock, print `HELD TOKEN`, keep it alive with reacquire() every TTL/4, and
           never release it: the test kills this process (a crashed holder).
  wait     wait up to SECONDS for the lock, print `ACQUIRED TOKEN` (or `TIMEOUT`), and keep it
           until stdin closes, then release it.
  late     take the lock, print `HELD TOKEN`, wait for a line on stdin (its lease has run out and
           another client holds the key by then), then release: prints `NOTOWNED` when redis-py
           refuses (its token is gone), `RELEASED` otherwise.
"""

import os
import random
import sys
import time

import redis
from redis.exceptions import LockNotOwnedError


def append(log, line):
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def main():
    url, key, log, mode, seconds, ttl_ms = sys.argv[1:7]
    seconds, ttl = float(seconds), int(ttl_ms) / 1000.0
    r = redis.Redis.from_url(url)
    pid = os.getpid()
    if mode == "contend":
        acquired = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            lock = r.lock(key, timeout=ttl, sleep=0.005, blocking_timeout=1.0)
            if not lock.acquire():
                continue
            token = lock.local.token.decode()
            for step in ("enter", "leave"):
                held = r.get(key)
                line = f"{step} py {pid} {token}"
                if held is None or held.decode() != token:
                    line = f"stolen py {pid} {token} {held!r}"
                append(log, line)
                if step == "enter":
                    time.sleep(random.uniform(0.002, 0.010))
            try:
                lock.release()
                acquired += 1
            except LockNotOwnedError:
                append(log, f"notowned py {pid} {token}")
            time.sleep(random.uniform(0.0, 0.010))
        print(f"acquired {acquired}", flush=True)
    elif mode == "hold":
        lock = r.lock(key, timeout=ttl, sleep=0.005)
        lock.acquire()
        print(f"HELD {lock.local.token.decode()}", flush=True)
        while True:
            time.sleep(ttl / 4)
            lock.reacquire()
    elif mode == "wait":
        lock = r.lock(key, timeout=ttl, sleep=0.005, blocking_timeout=seconds)
        if not lock.acquire():
            print("TIMEOUT", flush=True)
            return
        print(f"ACQUIRED {lock.local.token.decode()}", flush=True)
        sys.stdin.read()
        lock.release()
    elif mode == "late":
        lock = r.lock(key, timeout=ttl, sleep=0.005)
        lock.acquire()
        print(f"HELD {lock.local.token.decode()}", flush=True)
        sys.stdin.readline()
        try:
            lock.release()
            print("RELEASED", flush=True)
        except LockNotOwnedError:
            print("NOTOWNED", flush=True)
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
