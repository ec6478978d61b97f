# The attack suite's hostile client (tests/attacks.rs): `client.py PROXY_HOST:PORT` reads a JSON list of probes on
# stdin, tries each on a new connection to the proxy, prints a JSON list of results. It sends the exact bytes asked,
# including the shapes no HTTP library sends. Probes:
#   {"raw": TEXT, "expect": N}         TEXT (latin-1) as sent; up to N responses read (default 1)
#   {"connect": "HOST:PORT", "sni": NAME|null, "split": null|"segments"|"records"|"with-connect", "cafile": PATH|null,
#    "nontls": TEXT|null, "send": TEXT|null, "expect": N}
#       CONNECT, then TLS with that SNI (null: none) and the ClientHello sent as asked, then `send` inside TLS
#       (or `nontls` as plain bytes instead of TLS); `cafile` verifies the server's certificate for the SNI name
#   "hang_up_after": TEXT               (either kind) instead of reading responses, read until TEXT (latin-1) has
#       arrived, then close the connection at once, mid-response: the result has "status" (of the response head read,
#       0 if none), "read" (bytes read off the connection, inside TLS for a tunnel) and "seen" (whether TEXT came)
# Results: {"responses": [{"status", "reason", "body"}], "connect": STATUS, "tls": "ok"|"closed"|ERROR, "closed"}
import json, socket, ssl, sys, time

TIMEOUT = 5
proxy_host, proxy_port = sys.argv[1].rsplit(":", 1)


def parse(buf):
    """Complete responses at the front of buf, and what is left."""
    out = []
    while b"\r\n\r\n" in buf:
        head, rest = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
        length = int(headers.get("content-length", "0"))
        if len(rest) < length:
            break
        body, buf = rest[:length], rest[length:]
        status = int(lines[0].split(" ")[1])
        out.append({"status": status, "reason": headers.get("x-leash-reason"), "body": body.decode("latin-1")})
    return out, buf


def read_responses(recv, n):
    buf, got, closed = b"", [], False
    deadline = time.monotonic() + TIMEOUT
    while len(got) < n and time.monotonic() < deadline:
        try:
            chunk = recv()
        except (socket.timeout, ssl.SSLError, ConnectionError):
            closed = True
            break
        if not chunk:
            closed = True
            break
        buf += chunk
        more, buf = parse(buf)
        got += more
    return got, closed


def read_until(recv, text):
    """Reads until `text` has arrived (or the connection ends, or TIMEOUT): what a client that hangs up mid-response
    read before it did."""
    buf, want = b"", text.encode("latin-1")
    deadline = time.monotonic() + TIMEOUT
    while want not in buf and time.monotonic() < deadline:
        try:
            chunk = recv()
        except (socket.timeout, ssl.SSLError, ConnectionError):
            break
        if not chunk:
            break
        buf += chunk
    status = int(buf.split(b" ")[1]) if buf.startswith(b"HTTP/") and b" " in buf else 0
    return {"status": status, "read": len(buf), "seen": want in buf}


def dial():
    s = socket.create_connection((proxy_host, int(proxy_port)), timeout=TIMEOUT)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def raw(probe):
    s = dial()
    s.sendall(probe["raw"].encode("latin-1"))
    if "hang_up_after" in probe:
        read = read_until(lambda: s.recv(65536), probe["hang_up_after"])
        s.close()
        return read
    got, closed = read_responses(lambda: s.recv(65536), probe.get("expect", 1))
    return {"responses": got, "closed": closed}


def send_hello(s, data, split):
    if split == "segments":
        # One byte, then the rest in 40-byte segments: the SNI arrives segments after the record header.
        pieces = [data[:1]] + [data[i : i + 40] for i in range(1, len(data), 40)]
        for p in pieces:
            s.sendall(p)
            time.sleep(0.005)
    elif split == "records":
        # The handshake message re-framed into two TLS records (legal, and a parser must reassemble it).
        body = data[5:]
        k = len(body) // 2
        for part in (body[:k], body[k:]):
            s.sendall(data[:3] + len(part).to_bytes(2, "big") + part)
            time.sleep(0.05)
    else:
        s.sendall(data)


def tls_object(probe):
    if probe.get("cafile"):
        ctx = ssl.create_default_context(cafile=probe["cafile"])
    else:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["http/1.1"])
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    return ctx.wrap_bio(inc, out, server_hostname=probe.get("sni")), inc, out


def tunnel(probe):
    s = dial()
    connect = ("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (probe["connect"], probe["connect"])).encode("latin-1")
    obj, inc, out = tls_object(probe)
    first = True
    if probe.get("split") == "with-connect":
        # The ClientHello in the same segment as the CONNECT head, before the 200: leash must keep those bytes.
        try:
            obj.do_handshake()
        except ssl.SSLWantReadError:
            pass
        s.sendall(connect + out.read())
        first = False
    else:
        s.sendall(connect)
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(4096)
        if not chunk:
            return {"connect": 0, "closed": True}
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    status = int(head.split(b" ")[1])
    if status != 200:
        got, _ = parse(buf)
        return {"connect": status, "responses": got}
    if probe.get("nontls") is not None:
        s.sendall(probe["nontls"].encode("latin-1"))
        got, closed = read_responses(lambda: s.recv(65536), 1)
        return {"connect": status, "responses": got, "closed": closed}
    inc.write(rest)
    try:
        while True:
            try:
                obj.do_handshake()
                s.sendall(out.read())
                break
            except ssl.SSLWantReadError:
                data = out.read()
                if data:
                    send_hello(s, data, probe.get("split") if first else None)
                    first = False
                chunk = s.recv(65536)
                if not chunk:
                    return {"connect": status, "tls": "closed"}
                inc.write(chunk)
    except (ssl.SSLError, ConnectionError, socket.timeout) as e:
        return {"connect": status, "tls": "error: %s" % e}
    obj.write(probe.get("send", "").encode("latin-1"))
    s.sendall(out.read())

    def recv():
        while True:
            try:
                return obj.read(65536)
            except ssl.SSLWantReadError:
                chunk = s.recv(65536)
                if not chunk:
                    return b""
                inc.write(chunk)
                s.sendall(out.read())
            except ssl.SSLZeroReturnError:
                return b""

    if "hang_up_after" in probe:
        read = read_until(recv, probe["hang_up_after"])
        s.close()
        return dict(read, connect=status, tls="ok")
    got, closed = read_responses(recv, probe.get("expect", 1))
    return {"connect": status, "tls": "ok", "responses": got, "closed": closed}


results = []
for probe in json.load(sys.stdin):
    try:
        results.append(tunnel(probe) if "connect" in probe else raw(probe))
    except OSError as e:
        results.append({"error": str(e)})
print(json.dumps(results))
