#!/usr/bin/env python3
"""UDP flows for tests/multipath/test_netns_multipath.sh.

  udp_flows.py echo ADDR PORT SECONDS
      echo every datagram back to its sender; exit after SECONDS.
  udp_flows.py send SRC BASEPORT NPORTS DST PORT COUNT SIZE SECONDS [GAP_EVERY]
      from NPORTS sockets bound to SRC:BASEPORT.. send COUNT datagrams of SIZE
      bytes each to DST:PORT, one per socket in turn, with at most 64 unanswered
      (a reply or 20 ms frees a slot) unless GAP_EVERY is given: then no window,
      a 1 ms pause after every GAP_EVERY datagrams (a burst). Then collect
      replies for up to 1 s more; stop early at SECONDS. Prints
      "sent S replies R ports_answered P".
"""
import select
import socket
import sys
import time


def echo(addr, port, seconds):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind((addr, port))
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return 0
        r, _, _ = select.select([s], [], [], min(left, 1.0))
        if not r:
            continue
        for _ in range(256):
            try:
                data, peer = s.recvfrom(65536, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            try:
                s.sendto(data, peer)
            except OSError:
                pass  # a full queue on a rate-limited path: the reply is lost


def send(src, base, nports, dst, port, count, size, seconds, gap_every=0):
    end = time.monotonic() + seconds
    socks = []
    for i in range(nports):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        s.bind((src, base + i))
        s.setblocking(False)
        socks.append(s)
    payload = b"m" * size
    answered = [0] * nports
    fd_index = {s.fileno(): i for i, s in enumerate(socks)}
    poller = select.poll()
    for s in socks:
        poller.register(s, select.POLLIN)

    def drain(timeout_ms):
        got = 0
        for fd, _ in poller.poll(timeout_ms):
            i = fd_index[fd]
            while True:
                try:
                    socks[i].recv(65536)
                except (BlockingIOError, InterruptedError):
                    break
                answered[i] += 1
                got += 1
        return got

    sent = 0
    outstanding = 0
    for _ in range(count):
        for s in socks:
            if time.monotonic() > end:
                break
            if gap_every == 0:
                while outstanding >= 64 and time.monotonic() < end:
                    # No reply in 20 ms: count 8 as lost (drops, tbf).
                    outstanding = max(0, outstanding - (drain(20) or 8))
            try:
                s.sendto(payload, (dst, port))
                sent += 1
                outstanding += 1
            except (BlockingIOError, OSError):
                pass
            if gap_every and sent % gap_every == 0:
                drain(0)
                time.sleep(0.001)
    stop = min(end, time.monotonic() + 1.0)
    idle = 0
    while time.monotonic() < stop and idle < 3:
        idle = idle + 1 if drain(100) == 0 else 0
    print("sent %d replies %d ports_answered %d"
          % (sent, sum(answered), sum(1 for a in answered if a)))
    return 0


def main(argv):
    if len(argv) == 5 and argv[1] == "echo":
        return echo(argv[2], int(argv[3]), float(argv[4]))
    if len(argv) in (10, 11) and argv[1] == "send":
        return send(argv[2], int(argv[3]), int(argv[4]), argv[5], int(argv[6]),
                    int(argv[7]), int(argv[8]), float(argv[9]),
                    int(argv[10]) if len(argv) == 11 else 0)
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
