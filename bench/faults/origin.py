# The upstream for bench/faults.sh: `origin.py HTTP_PORT HOLD_PORT`, asyncio, on 127.0.0.1 of the script's own
# network namespace. Prints "ready" once both listen.
#   HTTP_PORT, keep-alive HTTP/1.1, by path:
#     /small          100 bytes
#     /big?n=BYTES    BYTES of a pattern, streamed 1 MiB at a time
#     /slow?ms=N      100 bytes after N ms
#     /upload         reads a Content-Length body, answers with its length
#     /reset          reads the head, then resets the connection (RST: SO_LINGER 0)
#     /close          reads the head, then closes without a byte
#     /hang           reads the head, never answers
#   HOLD_PORT: accepts, reads and discards, never answers (the far end of held tunnels).
import asyncio, socket, struct, sys
from urllib.parse import urlsplit, parse_qs

CHUNK = bytes(range(256)) * 4096  # 1 MiB


async def http(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            target = lines[0].split(" ")[1]
            url = urlsplit(target)
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            length = next((int(l.split(":", 1)[1]) for l in lines[1:] if l.lower().startswith("content-length:")), 0)
            path = url.path
            if path == "/reset":
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
                return
            if path == "/close":
                writer.close()
                return
            if path == "/hang":
                await asyncio.sleep(3600)
                return
            if path == "/upload":
                left = length
                while left:
                    data = await reader.read(min(left, 1 << 20))
                    if not data:
                        return
                    left -= len(data)
                body = str(length).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
                continue
            if length:
                await reader.readexactly(length)
            if path == "/slow":
                await asyncio.sleep(int(q.get("ms", "1000")) / 1000)
            if path == "/big":
                n = int(q["n"])
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % n)
                while n:
                    piece = CHUNK if n >= len(CHUNK) else CHUNK[:n]
                    writer.write(piece)
                    n -= len(piece)
                    await writer.drain()
                continue
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 100)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def hold(reader, writer):
    try:
        while await reader.read(65536):
            pass
    except ConnectionError:
        pass
    writer.close()


async def main():
    await asyncio.start_server(http, "127.0.0.1", int(sys.argv[1]), backlog=4096)
    await asyncio.start_server(hold, "127.0.0.1", int(sys.argv[2]), backlog=4096)
    print("ready", flush=True)
    await asyncio.Event().wait()


asyncio.run(main())
