# The attack suite's test hosts (tests/attacks.rs). Run as `world.py ROLE LOG DIR PORTS` inside a namespace the
# suite made. Every event is one line appended to LOG, prefixed by ROLE:
#   ROLE dns NAME TYPE          a DNS query (role "world" only; answers from DIR/dns.json)
#   ROLE conn PORT PEER         a TCP connection accepted on PORT (before any TLS handshake)
#   ROLE req PORT LINE | HOST   a request head read on PORT (request line and Host header)
#   ROLE events-end PORT PATH gone|timeout KEEPALIVES
#                               an event stream (a path under /events) ended: its client went away, or it ran
#                               EVENTS_FOR seconds; KEEPALIVES is how many keep-alive events were sent after the first
#   ROLE unix-conn              a connection on the Unix-socket relay (role "relay")
# Prints "ready" once every socket is bound.
import json, os, socket, ssl, sys, threading, time

role, log_path, work = sys.argv[1], sys.argv[2], sys.argv[3]
lock = threading.Lock()
# An event stream's first event, then a keep-alive every EVENTS_PACE seconds for at most EVENTS_FOR seconds.
FIRST_EVENT = b"event: token\ndata: first\n\n"
KEEP_ALIVE = b": keep-alive\n\n"
EVENTS_PACE, EVENTS_FOR = 0.1, 10


def log(*words):
    line = (role + " " + " ".join(str(w) for w in words) + "\n").encode()
    with lock:
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, line)
        os.close(fd)


def as_chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


def serve_events(conn, port, path):
    """A server-sent event stream (chunked): the first event at once, then keep-alives until the client goes away
    (a write fails) or EVENTS_FOR seconds have passed; either way the connection then closes."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n" + as_chunk(FIRST_EVENT))
    deadline, sent = time.monotonic() + EVENTS_FOR, 0
    while time.monotonic() < deadline:
        time.sleep(EVENTS_PACE)
        try:
            conn.sendall(as_chunk(KEEP_ALIVE))
        except OSError:
            log("events-end", port, path, "gone", sent)
            return
        sent += 1
    log("events-end", port, path, "timeout", sent)


def serve_http(conn, port):
    """Keep-alive HTTP/1.1: logs each head, answers `origin PATH` (Content-Length bodies only), or an event stream
    for a path under /events (see serve_events), which ends the connection."""
    buf = b""
    while True:
        while b"\r\n\r\n" not in buf:
            chunk = conn.recv(4096)
            if not chunk or len(buf) > 65536:
                return
            buf += chunk
        head, rest = buf.split(b"\r\n\r\n", 1)
        rest = bytearray(rest)
        lines = bytes(head).decode("latin-1").split("\r\n")
        host = next((l.split(":", 1)[1].strip() for l in lines[1:] if l.lower().startswith("host:")), "-")
        log("req", port, lines[0], "|", host)
        chunked = any(l.lower().startswith("transfer-encoding:") and "chunked" in l.lower() for l in lines[1:])
        length = next((int(l.split(":", 1)[1]) for l in lines[1:] if l.lower().startswith("content-length:")), 0)
        if chunked:
            length = chunked_length(conn, rest)
            if length is None:
                return
        while len(rest) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return
            rest += chunk
        buf = rest[length:]
        path = lines[0].split(" ")[1] if " " in lines[0] else "?"
        if path.startswith("/events"):
            return serve_events(conn, port, path)
        body = ("origin " + path).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


def chunked_length(conn, rest):
    """How many bytes of `rest` (a bytearray, read further as needed in place) a chunked body takes, trailers
    included; None when the connection ends first."""
    pos = 0
    while True:
        while rest.find(b"\r\n", pos) < 0:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            rest += chunk
        line_end = rest.find(b"\r\n", pos)
        size = int(bytes(rest[pos:line_end]).split(b";")[0], 16)
        pos = line_end + 2
        if size == 0:
            while True:
                if rest[pos : pos + 2] == b"\r\n":
                    return pos + 2
                end = rest.find(b"\r\n\r\n", pos)
                if end >= 0:
                    return end + 4
                chunk = conn.recv(65536)
                if not chunk:
                    return None
                rest += chunk
        pos += size + 2


def accept_loop(sock, port, tls):
    while True:
        conn, peer = sock.accept()
        log("conn", port, peer[0].removeprefix("::ffff:"))

        def run(conn=conn):
            try:
                if tls is not None:
                    conn = tls.wrap_socket(conn, server_side=True)
                serve_http(conn, port)
            except (OSError, ssl.SSLError):
                pass
            finally:
                conn.close()

        threading.Thread(target=run, daemon=True).start()


def tcp(port, tls=None, host="::"):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind((host, port))
    s.listen(128)
    threading.Thread(target=accept_loop, args=(s, port, tls), daemon=True).start()


def dns_answer(query, table, served):
    qid, flags = query[:2], query[2:4]
    pos, labels = 12, []
    while query[pos] != 0:
        labels.append(query[pos + 1 : pos + 1 + query[pos]].decode("latin-1"))
        pos += 1 + query[pos]
    qtype = int.from_bytes(query[pos + 1 : pos + 3], "big")
    question = query[12 : pos + 5]
    name = ".".join(labels).lower()
    log("dns", name, {1: "A", 28: "AAAA"}.get(qtype, qtype))
    answers = table.get(name)
    if answers is None:
        return qid + b"\x81\x83\x00\x01\x00\x00\x00\x00\x00\x00" + question
    # A list of answer lists is a rebinding name: each query gets the next list, the last one repeats.
    if answers and isinstance(answers[0], list):
        n = served.get((name, qtype), 0)
        served[(name, qtype)] = n + 1
        answers = answers[min(n, len(answers) - 1)]
    rrs = []
    for addr in answers:
        fam, rtype = (socket.AF_INET6, 28) if ":" in addr else (socket.AF_INET, 1)
        if rtype == qtype:
            data = socket.inet_pton(fam, addr)
            rrs.append(b"\xc0\x0c" + rtype.to_bytes(2, "big") + b"\x00\x01\x00\x00\x00\x00" + len(data).to_bytes(2, "big") + data)
    head = qid + b"\x81\x80\x00\x01" + len(rrs).to_bytes(2, "big") + b"\x00\x00\x00\x00"
    return head + question + b"".join(rrs)


def dns():
    table = json.load(open(os.path.join(work, "dns.json")))
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", 53))
    served = {}

    def loop():
        while True:
            query, peer = s.recvfrom(4096)
            try:
                s.sendto(dns_answer(query, table, served), peer)
            except (IndexError, ValueError):
                log("dns-malformed")

    threading.Thread(target=loop, daemon=True).start()


def relay(path, target):
    """A Unix-socket relay to TCP `target`: what an agent would use to get around the sandbox's network."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(16)

    def loop():
        while True:
            conn, _ = s.accept()
            log("unix-conn")
            try:
                up = socket.create_connection(target, timeout=3)
                up.sendall(conn.recv(65536))
                conn.sendall(up.recv(65536))
            except OSError:
                pass
            conn.close()

    threading.Thread(target=loop, daemon=True).start()


if role == "world":
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(os.path.join(work, "leaf.pem"), os.path.join(work, "leaf.key"))
    tls.set_alpn_protocols(["http/1.1"])
    tcp(80)
    tcp(8080)
    tcp(443, tls)
    tcp(8443, tls)
    dns()
elif role == "edge":
    # leash's own loopback: where a name rebound to 127.0.0.1 would lead.
    for port in (80, 443):
        tcp(port, None, "127.0.0.1")
elif role == "own":
    # An origin on an address a test gave leash's namespace: where a name answering it would lead.
    for port in (80, 443):
        tcp(port, None, sys.argv[4])
elif role == "any":
    # A service on the wildcard address of leash's namespace (IPv4 and IPv6), on port ARGV[4].
    tcp(int(sys.argv[4]))
elif role == "relay":
    relay(sys.argv[4], (sys.argv[5], 80))
print("ready", flush=True)
threading.Event().wait()
