"""Both ends of the h2c attack in tests/upgrades: a real origin that honours `Upgrade: h2c` (hypercorn), recording
every request it serves, and the attacker's client, which asks an allowed path to switch to h2c and then, 101 or
not, sends an HTTP/2 stream of its own for a path the policy refuses.

    h2c.py origin LOG [CERT KEY]   serve on a free loopback port (TLS with CERT and KEY); print `port N`
    h2c.py client MODE LEASH_PORT HOST PORT ALLOWED REFUSED [CAFILE]
                                   MODE: proxy (absolute-form through the proxy), tls (CONNECT, then TLS trusting
                                   CAFILE), service (origin-form to LEASH_PORT); prints what came back as JSON
"""

import asyncio
import json
import socket
import ssl
import sys

# How long the client waits for any answer: far beyond a loopback round trip, bounded so a test cannot hang.
READ_TIMEOUT = 10


def origin(log_path, cert=None, key=None):
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        with open(log_path, "a") as log:
            log.write(f"HTTP/{scope['http_version']} {scope['path']}\n")
        headers = [(b"content-type", b"text/plain"), (b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    config = Config()
    config.bind = [f"fd://{sock.fileno()}"]
    if cert:
        config.certfile, config.keyfile = cert, key
    print(f"port {sock.getsockname()[1]}", flush=True)
    asyncio.run(serve(app, config))


def read_head(sock):
    """The response head (text) and the bytes read after it."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head.decode("latin-1"), rest


def content_length(head):
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            return int(value.strip())
    return 0


def client(mode, leash_port, host, port, allowed, refused, cafile=None):
    import h2.config
    import h2.connection
    import h2.events
    import h2.exceptions

    sock = socket.create_connection(("127.0.0.1", int(leash_port)), timeout=READ_TIMEOUT)
    authority = f"{host}:{port}"
    target, scheme = allowed, "http"
    if mode == "tls":
        sock.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
        head, _ = read_head(sock)
        assert head.split()[1] == "200", head
        context = ssl.create_default_context(cafile=cafile)
        context.set_alpn_protocols(["http/1.1"])
        sock = context.wrap_socket(sock, server_hostname=host)
        scheme = "https"
    elif mode == "proxy":
        target = f"http://{authority}{allowed}"
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    settings = conn.initiate_upgrade_connection().decode()
    sock.sendall(
        (
            f"GET {target} HTTP/1.1\r\nHost: {authority}\r\nConnection: Upgrade, HTTP2-Settings\r\n"
            f"Upgrade: h2c\r\nHTTP2-Settings: {settings}\r\n\r\n"
        ).encode()
    )
    head, rest = read_head(sock)
    status = int(head.split()[1])
    upgraded = status == 101
    if not upgraded:
        # Declined: the rest of the answer is read, and the attacker speaks HTTP/2 on the connection anyway.
        while len(rest) < content_length(head):
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
    stream = 3 if upgraded else 1
    request = [(":method", "GET"), (":scheme", scheme), (":authority", authority), (":path", refused)]
    conn.send_headers(stream, request, end_stream=True)
    sock.sendall(conn.data_to_send())
    after, statuses, done = b"", {}, False
    while not done:
        try:
            chunk = sock.recv(65536)
        except (socket.timeout, ssl.SSLError, ConnectionError):
            break
        if not chunk:
            break
        after += chunk
        if not upgraded:
            continue
        try:
            events = conn.receive_data(chunk)
        except h2.exceptions.ProtocolError:
            break
        for event in events:
            if isinstance(event, h2.events.ResponseReceived):
                statuses[event.stream_id] = dict(event.headers).get(b":status", b"").decode()
            if isinstance(event, h2.events.StreamEnded) and event.stream_id == stream:
                done = True
        sock.sendall(conn.data_to_send())
    print(json.dumps({"first": status, "statuses": statuses, "after": after[:200].decode("latin-1")}))


if __name__ == "__main__":
    {"origin": origin, "client": client}[sys.argv[1]](*sys.argv[2:])
