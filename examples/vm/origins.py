"""The host's side of examples/vm/run.sh: origins on the host's loopback and a sentinel the guest must not reach.

Prints one line, `HTTP HTTPS SENTINEL` (the three ports), once all listen; runs until killed. HTTP on 127.0.0.1
answers `origin PATH`; HTTPS on 127.0.0.1 (leaf.pem/leaf.key in the working directory, for docs.test) answers
`origin-tls PATH`; the sentinel listens on every host address and appends the peer of any connection to
sentinel.log, which must stay empty.
"""
import http.server
import socket
import ssl
import threading


class Origin(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    prefix = "origin"

    def do_GET(self):
        body = f"{self.prefix} {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class TlsOrigin(Origin):
    prefix = "origin-tls"


def serve(server):
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def sentinel():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 0))
    s.listen(16)

    def accept():
        while True:
            conn, peer = s.accept()
            with open("sentinel.log", "a") as f:
                f.write(f"{peer[0]}:{peer[1]}\n")
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    return s.getsockname()[1]


http_port = serve(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Origin))
tls = http.server.ThreadingHTTPServer(("127.0.0.1", 0), TlsOrigin)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("leaf.pem", "leaf.key")
tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
https_port = serve(tls)
print(http_port, https_port, sentinel(), flush=True)
threading.Event().wait()
